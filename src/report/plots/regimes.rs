//! Lines on log-log axes whose points each carry the name of what limited
//! them: where the name changes along a line (a change of slope), the new
//! name is written beside the point where it starts, in the line's colour.

use std::path::Path;

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::{
    Axis, DrawResult, Figure, Frame, LABEL_SIZE, Legend, LogAxis, PlotError, color, draw_dotted_line, height_with_legend, save, text_error,
};

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
    fn size(&self) -> (u32, u32) {
        height_with_legend(self.series.len())
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> DrawResult {
        let points = || self.series.iter().flat_map(|s| s.points.iter());
        // One more step on the right, for the labels of the last points.
        let x_axis = Axis::log(self.x_axis, points().map(|p| p.0)).widened(1);
        // A quarter more room above the highest point, for its label.
        let y_axis = Axis::log(LogAxis::Decimal, points().map(|p| p.1).chain(points().map(|p| p.1 * 1.25)));
        let frame = Frame::new(&self.title, (&x_axis, &y_axis), (&self.x_label, &self.y_label)).legend(self.series.len());
        let mut chart = frame.draw(root)?;
        // Labels sit a small fraction of the y range above or below their points.
        let nudge = 0.04 * (y_axis.range.end - y_axis.range.start) / 3.0;
        let to_log = |p: &(f64, f64, String)| (x_axis.at(p.0), y_axis.at(p.1));
        let mut legend = Legend::new();
        for (s, series) in self.series.iter().enumerate() {
            draw_dotted_line(&mut chart, &mut legend, s, &series.name, series.points.iter().map(to_log), 4)?;
            // Labels of alternate series go above and below their lines.
            let (anchor, nudge) = if s % 2 == 0 { (VPos::Bottom, nudge) } else { (VPos::Top, -nudge) };
            let style = ("sans-serif", LABEL_SIZE).into_font().color(&color(s)).pos(Pos::new(HPos::Left, anchor));
            let labels = series.changes().map(|p| {
                let (x, y) = to_log(p);
                Text::new(format!(" {}", p.2), (x, y + nudge), style.clone())
            });
            chart.draw_series(labels).map_err(text_error)?;
        }
        legend.draw(root, &chart, frame.x_area)
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
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
