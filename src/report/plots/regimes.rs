//! Lines on log-log axes whose points each carry the name of what limited
//! them: where the name changes along a line (a change of slope), the new
//! name is written beside the point where it starts, in the line's colour.

use std::path::Path;

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::{DrawResult, Figure, LABEL_SIZE, LogAxis, PlotError, color, draw_dotted_line, draw_legend, log_log_chart, save, text_error};

/// One line: points `(x, y, regime)` in order of x.
#[derive(Debug, Clone)]
pub struct RegimeSeries {
    pub name: String,
    pub points: Vec<(f64, f64, String)>,
}

/// Lines with their regimes labelled.
#[derive(Debug, Clone)]
pub struct RegimeLines {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub x_axis: LogAxis,
    pub series: Vec<RegimeSeries>,
}

pub fn regime_lines(chart: &RegimeLines, path: &Path) -> Result<(), PlotError> {
    save(chart, path)
}

impl RegimeSeries {
    /// The points where a regime starts: the first, then each change.
    fn changes(&self) -> impl Iterator<Item = &(f64, f64, String)> {
        self.points.iter().enumerate().filter(|(i, p)| *i == 0 || self.points[i - 1].2 != p.2).map(|(_, p)| p)
    }
}

impl Figure for RegimeLines {
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> DrawResult {
        let points = || self.series.iter().flat_map(|s| s.points.iter());
        // One more step on the right, for the labels of the last points.
        let (x_range, x_labels) = self.x_axis.range(points().map(|p| p.0));
        let (x_range, x_labels) = (x_range.start..x_range.end + 1.0, x_labels + 1);
        let (y_range, y_labels) = LogAxis::Decimal.range(points().map(|p| p.1));
        let x_axis = self.x_axis;
        let mut chart = log_log_chart(root, &self.title, x_axis, (x_range, x_labels), (y_range, y_labels), (&self.x_label, &self.y_label))?;
        let to_log = move |p: &(f64, f64, String)| (x_axis.to_axis(p.0), p.1.log10());
        for (s, series) in self.series.iter().enumerate() {
            draw_dotted_line(&mut chart, s, &series.name, series.points.iter().map(to_log), 4)?;
            // Labels of alternate series go above and below their lines.
            let (anchor, nudge) = if s % 2 == 0 { (VPos::Bottom, 0.04) } else { (VPos::Top, -0.04) };
            let style = ("sans-serif", LABEL_SIZE).into_font().color(&color(s)).pos(Pos::new(HPos::Left, anchor));
            let labels = series.changes().map(|p| {
                let (x, y) = to_log(p);
                Text::new(format!(" {}", p.2), (x, y + nudge), style.clone())
            });
            chart.draw_series(labels).map_err(text_error)?;
        }
        draw_legend(&mut chart, SeriesLabelPosition::UpperRight)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_label_at_the_first_point_and_at_every_change() {
        let point = |x: f64, regime: &str| (x, 1.0 / x, regime.to_string());
        let series = RegimeSeries {
            name: "gds".into(),
            points: vec![point(1.0, "drives"), point(2.0, "drives"), point(4.0, "link"), point(8.0, "link")],
        };
        let starts: Vec<(f64, &str)> = series.changes().map(|p| (p.0, p.2.as_str())).collect();
        assert_eq!(starts, [(1.0, "drives"), (4.0, "link")]);
        let dir = std::env::temp_dir().join(format!("icsim-regimes-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let chart =
            RegimeLines { title: "t".into(), x_label: "drives".into(), y_label: "s".into(), x_axis: LogAxis::Count, series: vec![series] };
        for name in ["r.png", "r.svg"] {
            regime_lines(&chart, &dir.join(name)).unwrap();
        }
        let svg = std::fs::read_to_string(dir.join("r.svg")).unwrap();
        assert!(svg.contains("drives") && svg.contains("link"), "both regimes are written");
        assert_eq!(LogAxis::Count.label(5.0), "32");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
