//! The figures of a sweep: curves of a metric against one axis (numbers on
//! a linear or log scale, or named categories) with reference series drawn
//! dashed, a heatmap over two axes, and the Pareto front of two metrics.
//! General shapes filled by the caller; nothing here knows what the numbers
//! mean.

use std::path::Path;

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::{
    DrawResult, Figure, LABEL_SIZE, LineSeries_, LogChart, PlotError, TITLE_SIZE, color, draw_grid, draw_legend, number_label, save,
    text_error,
};

/// How the x axis maps values.
#[derive(Debug, Clone, PartialEq)]
pub enum XScale {
    Linear,
    Log,
    /// Named values at 0, 1, 2, ... in this order.
    Categories(Vec<String>),
}

/// A named line. A reference series (a published figure) is drawn dashed
/// with triangles, in the colour of the line it is compared with.
#[derive(Debug, Clone)]
pub struct Curve {
    pub name: String,
    pub points: Vec<(f64, f64)>,
    pub reference: bool,
    /// Index into the palette.
    pub colour: usize,
}

/// A dashed line across a plot at a value of y: the value, its name in the
/// legend, its palette colour.
pub type Bound = (f64, String, usize);

/// A ringed point: x, y and its palette colour.
pub type Mark = (f64, f64, usize);

/// Lines of a metric against one axis.
#[derive(Debug, Clone)]
pub struct Curves {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub x: XScale,
    pub log_y: bool,
    pub series: Vec<Curve>,
    /// Dashed lines across the plot at a value of y (a bound a metric must
    /// stay within), each named in the legend, in a palette colour.
    pub bounds: Vec<Bound>,
    /// Points ringed (the knee of a line), in a palette colour, named
    /// once in the legend by `marks_label`.
    pub marks: Vec<Mark>,
    pub marks_label: String,
}

pub fn curves(chart: &Curves, path: &Path) -> Result<(), PlotError> {
    save(chart, path)
}

/// A value axis: linear, or logarithmic in base 2 (labels at powers of
/// two, for data within three decades) or base 10.
#[derive(Debug, Clone)]
struct ValueAxis {
    log_base: Option<f64>,
    range: std::ops::Range<f64>,
    labels: usize,
}

impl ValueAxis {
    /// The axis covering `values`: log ranges are whole powers of their
    /// base, linear ones start at zero (or below) with a margin above.
    fn new(log: bool, values: impl Iterator<Item = f64>) -> ValueAxis {
        let positive = |v: &f64| v.is_finite() && (!log || *v > 0.0);
        let (low, high) = values.filter(positive).fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| (lo.min(v), hi.max(v)));
        let (low, high) = if low.is_finite() { (low, high) } else { (1.0, 10.0) };
        if !log {
            let low = low.min(0.0);
            let high = if high <= low { low + 1.0 } else { high + (high - low) * 0.08 };
            return ValueAxis { log_base: None, range: low..high, labels: 8 };
        }
        let base: f64 = if (high / low).log10() < 3.0 { 2.0 } else { 10.0 };
        let (start, end) = (low.log(base).floor(), high.log(base).ceil());
        let end = if end <= start { start + 1.0 } else { end };
        let steps = (end - start) as usize;
        ValueAxis { log_base: Some(base), range: start..end, labels: if steps <= 12 { steps + 1 } else { steps / 2 + 1 } }
    }

    fn at(&self, value: f64) -> f64 {
        self.log_base.map_or(value, |base| value.log(base))
    }

    /// Labels a position with the value it stands for.
    fn label(&self, position: f64) -> String {
        number_label(self.log_base.map_or(position, |base| base.powf(position)))
    }
}

/// An axis's range, how many labels it has and how they read.
type Ticks<'f> = (std::ops::Range<f64>, usize, &'f dyn Fn(&f64) -> String);

/// A chart on two f64 axes with its title, grid and labels.
fn frame<'a, DB: DrawingBackend>(
    root: &'a DrawingArea<DB, Shift>,
    title: &str,
    (x_range, x_labels, x_format): Ticks,
    (y_range, y_labels, y_format): Ticks,
    (x_desc, y_desc): (&str, &str),
    right: u32,
) -> Result<LogChart<'a, DB>, String> {
    // A long title is set smaller rather than cut off.
    let size = (TITLE_SIZE * 72 / (title.chars().count() as u32).max(72)).max(14);
    let mut chart = ChartBuilder::on(root)
        .caption(title, ("sans-serif", size))
        .margin(20)
        .margin_right(45 + right)
        .x_label_area_size(55)
        .y_label_area_size(85)
        .build_cartesian_2d(x_range, y_range)
        .map_err(text_error)?;
    draw_grid(&mut chart, (x_labels, x_format), (y_labels, y_format), (x_desc, y_desc))?;
    Ok(chart)
}

/// Formats category positions by name, and nothing between them.
fn category_format(names: &[String]) -> impl Fn(&f64) -> String + '_ {
    move |v: &f64| {
        let index = v.round();
        if (v - index).abs() < 1e-6 && index >= 0.0 { names.get(index as usize).cloned().unwrap_or_default() } else { String::new() }
    }
}

impl Figure for Curves {
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> DrawResult {
        let points = || self.series.iter().flat_map(|s| &s.points);
        let x_axis = ValueAxis::new(self.x == XScale::Log, points().map(|p| p.0));
        let y_axis = ValueAxis::new(self.log_y, points().map(|p| p.1).chain(self.bounds.iter().map(|b| b.0)));
        let names = match &self.x {
            XScale::Categories(names) => names.clone(),
            _ => Vec::new(),
        };
        let (x_range, x_labels) =
            if names.is_empty() { (x_axis.range.clone(), x_axis.labels) } else { (-0.5..(names.len() as f64 - 0.5), names.len() * 2 + 1) };
        let categories = category_format(&names);
        let numbers = |v: &f64| x_axis.label(*v);
        let x_format: &dyn Fn(&f64) -> String = if names.is_empty() { &numbers } else { &categories };
        let y_format = |v: &f64| y_axis.label(*v);
        let (x_start, x_end) = (x_range.start, x_range.end);
        let mut chart = frame(
            root,
            &self.title,
            (x_range, x_labels, x_format),
            (y_axis.range.clone(), y_axis.labels, &y_format),
            (&self.x_label, &self.y_label),
            0,
        )?;
        let at = |&(x, y): &(f64, f64)| (if names.is_empty() { x_axis.at(x) } else { x }, y_axis.at(y));
        for series in &self.series {
            let style = color(series.colour).stroke_width(if series.reference { 2 } else { 3 });
            let mut sorted: Vec<(f64, f64)> = series.points.iter().map(at).collect();
            sorted.sort_by(|a, b| a.0.total_cmp(&b.0));
            if series.reference {
                chart.draw_series(DashedLineSeries::new(sorted.clone(), 10, 6, style)).map_err(text_error)?;
                chart
                    .draw_series(sorted.iter().map(|&p| TriangleMarker::new(p, 8, style)))
                    .map_err(text_error)?
                    .label(&series.name)
                    .legend(move |(x, y)| {
                        EmptyElement::at((x, y))
                            + plotters::element::DashedPathElement::new([(0, 0), (24, 0)], 6, 4, style)
                            + TriangleMarker::new((12, 0), 7, style)
                    });
            } else {
                chart
                    .draw_series(LineSeries_::new(sorted.clone(), style))
                    .map_err(text_error)?
                    .label(&series.name)
                    .legend(move |(x, y)| PathElement::new([(x, y), (x + 24, y)], style));
                chart.draw_series(sorted.iter().map(|&p| Circle::new(p, 4, style.color.filled()))).map_err(text_error)?;
            }
        }
        for (value, name, colour) in &self.bounds {
            let style = color(*colour).stroke_width(2);
            let y = y_axis.at(*value);
            chart
                .draw_series(DashedLineSeries::new([(x_start, y), (x_end, y)], 12, 8, style))
                .map_err(text_error)?
                .label(name)
                .legend(move |(x, y)| plotters::element::DashedPathElement::new([(x, y), (x + 24, y)], 6, 4, style));
        }
        if !self.marks.is_empty() {
            let rings = self.marks.iter().map(|&(x, y, colour)| Circle::new(at(&(x, y)), 11, color(colour).stroke_width(3)));
            chart
                .draw_series(rings)
                .map_err(text_error)?
                .label(&self.marks_label)
                .legend(|(x, y)| Circle::new((x + 12, y), 8, BLACK.stroke_width(3)));
        }
        draw_legend(&mut chart, SeriesLabelPosition::UpperLeft)
    }
}

// ------------------------------------------------------------------ heatmap

/// A metric over two axes: one coloured cell per (x, y) with its value.
#[derive(Debug, Clone)]
pub struct Heatmap {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub x_ticks: Vec<String>,
    pub y_ticks: Vec<String>,
    /// (x index, y index, value).
    pub cells: Vec<(usize, usize, f64)>,
    /// What the colours mean, with its unit.
    pub value_label: String,
}

pub fn heatmap(chart: &Heatmap, path: &Path) -> Result<(), PlotError> {
    save(chart, path)
}

/// A colour from dark blue (0) through green to yellow (1), after viridis.
fn ramp(t: f64) -> RGBColor {
    const STOPS: [(f64, f64, f64); 5] =
        [(68.0, 1.0, 84.0), (59.0, 82.0, 139.0), (33.0, 145.0, 140.0), (94.0, 201.0, 98.0), (253.0, 231.0, 37.0)];
    let t = t.clamp(0.0, 1.0) * (STOPS.len() - 1) as f64;
    let (i, f) = ((t.floor() as usize).min(STOPS.len() - 2), t - t.floor().min((STOPS.len() - 2) as f64));
    let mix = |a: f64, b: f64| (a + (b - a) * f).round() as u8;
    let (a, b) = (STOPS[i], STOPS[i + 1]);
    RGBColor(mix(a.0, b.0), mix(a.1, b.1), mix(a.2, b.2))
}

impl Figure for Heatmap {
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> DrawResult {
        let (nx, ny) = (self.x_ticks.len(), self.y_ticks.len());
        let x_format = category_format(&self.x_ticks);
        let y_format = category_format(&self.y_ticks);
        let x = (-0.5..(nx as f64 - 0.5), nx * 2 + 1, &x_format as &dyn Fn(&f64) -> String);
        let y = (-0.5..(ny as f64 - 0.5), ny * 2 + 1, &y_format as &dyn Fn(&f64) -> String);
        let mut chart = frame(root, &self.title, x, y, (&self.x_label, &self.y_label), 110)?;
        let (low, high) = self.cells.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), c| (lo.min(c.2), hi.max(c.2)));
        let scale = |v: f64| if high > low { (v - low) / (high - low) } else { 0.5 };
        let cells = self.cells.iter().map(|&(i, j, v)| {
            Rectangle::new([(i as f64 - 0.5, j as f64 - 0.5), (i as f64 + 0.5, j as f64 + 0.5)], ramp(scale(v)).filled())
        });
        chart.draw_series(cells).map_err(text_error)?;
        let centred = Pos::new(HPos::Center, VPos::Center);
        let labels = self.cells.iter().map(|&(i, j, v)| {
            let ink = if scale(v) > 0.6 { BLACK } else { WHITE };
            Text::new(number_label(v), (i as f64, j as f64), ("sans-serif", LABEL_SIZE).into_font().color(&ink).pos(centred))
        });
        chart.draw_series(labels).map_err(text_error)?;
        // The colour bar at the right, lowest value at the bottom.
        let (width, height) = root.dim_in_pixel();
        let (left, top, bottom) = (width as i32 - 110, 100, height as i32 - 90);
        for y in top..bottom {
            let t = f64::from(bottom - y) / f64::from(bottom - top);
            root.draw(&Rectangle::new([(left, y), (left + 24, y + 1)], ramp(t).filled())).map_err(text_error)?;
        }
        let style = ("sans-serif", LABEL_SIZE).into_font().into_text_style(root);
        for (value, y) in [(high, top), (low, bottom)] {
            root.draw(&Text::new(number_label(value), (left + 30, y - 8), style.clone())).map_err(text_error)?;
        }
        let caption = ("sans-serif", LABEL_SIZE).into_font().into_text_style(root).pos(Pos::new(HPos::Right, VPos::Bottom));
        root.draw(&Text::new(self.value_label.clone(), (width as i32 - 15, top - 14), caption)).map_err(text_error)
    }
}

// ------------------------------------------------------------------ Pareto front

/// Points of two metrics, both better when lower, with the points no other
/// beats on both (the front) joined and named.
#[derive(Debug, Clone)]
pub struct Pareto {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub log_x: bool,
    pub log_y: bool,
    /// (x, y, whether the point meets the goal).
    pub points: Vec<(f64, f64, bool)>,
    /// The front, in x order, each with a short name.
    pub front: Vec<(f64, f64, String)>,
}

pub fn pareto(chart: &Pareto, path: &Path) -> Result<(), PlotError> {
    save(chart, path)
}

impl Figure for Pareto {
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> DrawResult {
        let x_axis = ValueAxis::new(self.log_x, self.points.iter().map(|p| p.0));
        let y_axis = ValueAxis::new(self.log_y, self.points.iter().map(|p| p.1));
        let middle = (x_axis.range.start + x_axis.range.end) / 2.0;
        let (x_format, y_format) = (|v: &f64| x_axis.label(*v), |v: &f64| y_axis.label(*v));
        let mut chart = frame(
            root,
            &self.title,
            (x_axis.range.clone(), x_axis.labels, &x_format),
            (y_axis.range.clone(), y_axis.labels, &y_format),
            (&self.x_label, &self.y_label),
            0,
        )?;
        let at = |x: f64, y: f64| (x_axis.at(x), y_axis.at(y));
        for (meets, name, style) in [(false, "misses the goal", RGBColor(160, 160, 160)), (true, "meets the goal", color(0))] {
            chart
                .draw_series(self.points.iter().filter(|p| p.2 == meets).map(|p| Circle::new(at(p.0, p.1), 4, style.filled())))
                .map_err(text_error)?
                .label(name)
                .legend(move |(x, y)| Circle::new((x + 12, y), 5, style.filled()));
        }
        let front: Vec<(f64, f64)> = self.front.iter().map(|p| at(p.0, p.1)).collect();
        let line = color(3).stroke_width(3);
        chart
            .draw_series(LineSeries_::new(front.clone(), line))
            .map_err(text_error)?
            .label("Pareto front (nothing is both faster and cheaper)")
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 24, y)], line));
        chart.draw_series(front.iter().map(|&p| Circle::new(p, 6, line))).map_err(text_error)?;
        // Names right of points in the left half, left of those in the right half.
        let style = ("sans-serif", LABEL_SIZE - 3).into_font().into_text_style(root);
        let names = self.front.iter().map(|(x, y, name)| {
            let p = at(*x, *y);
            let (anchor, text) = if p.0 < middle { (HPos::Left, format!("  {name}")) } else { (HPos::Right, format!("{name}  ")) };
            Text::new(text, p, style.clone().pos(Pos::new(anchor, VPos::Bottom)))
        });
        chart.draw_series(names).map_err(text_error)?;
        draw_legend(&mut chart, SeriesLabelPosition::UpperRight)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_sweep_figure_writes_png_and_svg() {
        let dir = std::env::temp_dir().join(format!("icsim-sweep-plots-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let curve = |name: &str, reference, colour| Curve {
            name: name.into(),
            points: vec![(1.0, 2.0), (4.0, 3.0), (32.0, 9.0)],
            reference,
            colour,
        };
        let lines = Curves {
            title: "Curves".into(),
            x_label: "batch".into(),
            y_label: "tokens/s".into(),
            x: XScale::Log,
            log_y: false,
            series: vec![curve("icsim", false, 0), curve("published", true, 0)],
            bounds: vec![(5.0, "at most 5".into(), 7)],
            marks: vec![(4.0, 3.0, 0)],
            marks_label: "knee".into(),
        };
        let map = Heatmap {
            title: "Map".into(),
            x_label: "x".into(),
            y_label: "y".into(),
            x_ticks: vec!["a".into(), "b".into()],
            y_ticks: vec!["2".into()],
            cells: vec![(0, 0, 0.1), (1, 0, 0.3)],
            value_label: "share".into(),
        };
        let front = Pareto {
            title: "Front".into(),
            x_label: "ms".into(),
            y_label: "$".into(),
            log_x: true,
            log_y: false,
            points: vec![(10.0, 5.0, true), (20.0, 2.0, false), (30.0, 4.0, true)],
            front: vec![(10.0, 5.0, "a".into()), (20.0, 2.0, "b".into())],
        };
        for extension in ["png", "svg"] {
            curves(&lines, &dir.join(format!("curves.{extension}"))).unwrap();
            heatmap(&map, &dir.join(format!("heatmap.{extension}"))).unwrap();
            pareto(&front, &dir.join(format!("pareto.{extension}"))).unwrap();
        }
        for name in ["curves", "heatmap", "pareto"] {
            let png = std::fs::read(dir.join(format!("{name}.png"))).unwrap();
            assert!(png.starts_with(b"\x89PNG") && png.len() > 5_000, "{name}.png");
            let svg = std::fs::read_to_string(dir.join(format!("{name}.svg"))).unwrap();
            assert!(svg.starts_with("<svg") && svg.contains("<text"), "{name}.svg");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn log_axes_mark_powers_of_two_within_three_decades_and_of_ten_beyond() {
        let batches = ValueAxis::new(true, [1.0, 32.0].into_iter());
        assert_eq!((batches.range.clone(), batches.labels), (0.0..5.0, 6));
        assert_eq!(batches.label(3.0), "8");
        let dollars = ValueAxis::new(true, [0.02, 350.0].into_iter());
        assert_eq!((dollars.range.clone(), dollars.label(-2.0)), (-2.0..3.0, "0.01".to_string()));
        let linear = ValueAxis::new(false, [5.0, 105.0].into_iter());
        assert!(linear.range.start == 0.0 && (linear.range.end - 113.4).abs() < 1e-9, "{:?}", linear.range);
    }

    #[test]
    fn the_colour_ramp_runs_from_dark_to_light() {
        assert_eq!(ramp(0.0), RGBColor(68, 1, 84));
        assert_eq!(ramp(1.0), RGBColor(253, 231, 37));
        let brightness = |c: RGBColor| u32::from(c.0) + u32::from(c.1) + u32::from(c.2);
        assert!(brightness(ramp(0.3)) < brightness(ramp(0.7)));
    }
}
