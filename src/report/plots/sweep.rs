//! The figures of a sweep: curves of a metric against one axis (numbers on
//! a linear or log scale, or named categories) with reference series drawn
//! dashed, a heatmap over two axes, and the Pareto front of two metrics.
//! General shapes filled by the caller; nothing here knows what the numbers
//! mean.

use std::path::Path;

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::axis::{LogAxis, multiples, round_sig, step_125};
use super::{
    Axis, DrawResult, Figure, Frame, LABEL_SIZE, Legend, LineSeries_, PlotError, color, height_with_legend, labels, number_label, save,
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

impl Curves {
    fn legend_entries(&self) -> usize {
        self.series.len() + self.bounds.len() + usize::from(!self.marks.is_empty())
    }
}

impl Figure for Curves {
    fn size(&self) -> (u32, u32) {
        height_with_legend(self.legend_entries())
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> DrawResult {
        let points = || self.series.iter().flat_map(|s| &s.points);
        let x_axis = match &self.x {
            XScale::Categories(names) => Axis::categories(names),
            scale => Axis::new(*scale == XScale::Log, points().map(|p| p.0)),
        };
        let y_axis = Axis::new(self.log_y, points().map(|p| p.1).chain(self.bounds.iter().map(|b| b.0)));
        let (x_start, x_end) = (x_axis.range.start, x_axis.range.end);
        let frame = Frame::new(&self.title, (&x_axis, &y_axis), (&self.x_label, &self.y_label)).legend(self.legend_entries());
        let mut chart = frame.draw(root)?;
        let at = |&(x, y): &(f64, f64)| (x_axis.at(x), y_axis.at(y));
        let mut legend = Legend::new();
        for series in &self.series {
            let style = color(series.colour).stroke_width(if series.reference { 2 } else { 3 });
            let mut sorted: Vec<(f64, f64)> = series.points.iter().map(at).collect();
            sorted.sort_by(|a, b| a.0.total_cmp(&b.0));
            if series.reference {
                chart.draw_series(DashedLineSeries::new(sorted.clone(), 10, 6, style)).map_err(text_error)?;
                chart.draw_series(sorted.iter().map(|&p| TriangleMarker::new(p, 8, style))).map_err(text_error)?;
                legend
                    .add(&series.name, move |(x, y)| plotters::element::DashedPathElement::new([(x, y), (x + 24, y)], 6, 4, style))
                    .also(move |(x, y)| TriangleMarker::new((x + 12, y), 7, style));
            } else {
                chart.draw_series(LineSeries_::new(sorted.clone(), style)).map_err(text_error)?;
                legend.add(&series.name, move |(x, y)| PathElement::new([(x, y), (x + 24, y)], style));
                chart.draw_series(sorted.iter().map(|&p| Circle::new(p, 4, style.color.filled()))).map_err(text_error)?;
            }
        }
        for (value, name, colour) in &self.bounds {
            let style = color(*colour).stroke_width(2);
            let y = y_axis.at(*value);
            chart.draw_series(DashedLineSeries::new([(x_start, y), (x_end, y)], 12, 8, style)).map_err(text_error)?;
            legend.add(name, move |(x, y)| plotters::element::DashedPathElement::new([(x, y), (x + 24, y)], 6, 4, style));
        }
        if !self.marks.is_empty() {
            let rings = self.marks.iter().map(|&(x, y, colour)| Circle::new(at(&(x, y)), 11, color(colour).stroke_width(3)));
            chart.draw_series(rings).map_err(text_error)?;
            legend.add(&self.marks_label, |(x, y)| Circle::new((x + 12, y), 8, BLACK.stroke_width(3)));
        }
        legend.draw(root, &chart, frame.x_area)
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

/// How a heatmap's values map to colours: on a log scale where they span a
/// decade or more (all above zero), so that the small ones do not all look
/// alike; on a linear one otherwise.
#[derive(Debug, Clone, Copy, PartialEq)]
enum ColourScale {
    Linear { low: f64, high: f64 },
    Log { low: f64, high: f64 },
}

impl ColourScale {
    fn of(values: impl Iterator<Item = f64>) -> ColourScale {
        let (low, high) = values.filter(|v| v.is_finite()).fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| (lo.min(v), hi.max(v)));
        if !low.is_finite() {
            return ColourScale::Linear { low: 0.0, high: 1.0 };
        }
        if low > 0.0 && high / low >= 10.0 { ColourScale::Log { low, high } } else { ColourScale::Linear { low, high } }
    }

    /// Where `value` sits between the lowest (0) and the highest (1).
    fn fraction(&self, value: f64) -> f64 {
        let (low, high, at) = match *self {
            ColourScale::Linear { low, high } => (low, high, value),
            ColourScale::Log { low, high } => (low.log10(), high.log10(), value.max(f64::MIN_POSITIVE).log10()),
        };
        if high > low { ((at - low) / (high - low)).clamp(0.0, 1.0) } else { 0.5 }
    }

    /// The values the colour bar names: 1-2-5 steps (linear) or decades,
    /// with 2 and 5 between over a short range (log), within the values;
    /// the lowest and highest where fewer than two fall within.
    fn ticks(&self) -> Vec<f64> {
        if let ColourScale::Linear { low, high } = *self
            && high <= low
        {
            return vec![low];
        }
        let (low, high, ticks) = match *self {
            ColourScale::Linear { low, high } => (low, high, multiples(step_125(high - low), &(low..high))),
            ColourScale::Log { low, high } => {
                let axis = Axis::log(LogAxis::Decimal, [low, high].into_iter());
                (low, high, axis.ticks.iter().map(|t| round_sig(10f64.powf(*t))).collect())
            }
        };
        let slack = (high - low).abs() * 1e-9;
        let within: Vec<f64> = ticks.into_iter().filter(|t| (low - slack..=high + slack).contains(t)).collect();
        if within.len() >= 2 { within } else { vec![low, high] }
    }
}

impl Figure for Heatmap {
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> DrawResult {
        let (x_axis, y_axis) = (Axis::categories(&self.x_ticks), Axis::categories(&self.y_ticks));
        let mut frame = Frame::new(&self.title, (&x_axis, &y_axis), (&self.x_label, &self.y_label));
        frame.right = 130;
        let mut chart = frame.draw(root)?;
        let scale = ColourScale::of(self.cells.iter().map(|c| c.2));
        let cells = self.cells.iter().map(|&(i, j, v)| {
            Rectangle::new([(i as f64 - 0.5, j as f64 - 0.5), (i as f64 + 0.5, j as f64 + 0.5)], ramp(scale.fraction(v)).filled())
        });
        chart.draw_series(cells).map_err(text_error)?;
        let centred = Pos::new(HPos::Center, VPos::Center);
        let labels = self.cells.iter().map(|&(i, j, v)| {
            let ink = if scale.fraction(v) > 0.6 { BLACK } else { WHITE };
            Text::new(number_label(v), (i as f64, j as f64), ("sans-serif", LABEL_SIZE).into_font().color(&ink).pos(centred))
        });
        chart.draw_series(labels).map_err(text_error)?;
        // The colour bar at the right, lowest value at the bottom, its
        // ticks named; a log scale says so.
        let (width, height) = root.dim_in_pixel();
        let (left, top, bottom) = (width as i32 - 130, 100, height as i32 - 90);
        for y in top..bottom {
            let t = f64::from(bottom - y) / f64::from(bottom - top);
            root.draw(&Rectangle::new([(left, y), (left + 24, y + 1)], ramp(t).filled())).map_err(text_error)?;
        }
        let style = ("sans-serif", LABEL_SIZE).into_font().into_text_style(root).pos(Pos::new(HPos::Left, VPos::Center));
        for value in scale.ticks() {
            let y = bottom - (scale.fraction(value) * f64::from(bottom - top)).round() as i32;
            root.draw(&PathElement::new([(left + 24, y), (left + 30, y)], BLACK.stroke_width(1))).map_err(text_error)?;
            root.draw(&Text::new(number_label(value), (left + 34, y), style.clone())).map_err(text_error)?;
        }
        let caption = ("sans-serif", LABEL_SIZE).into_font().into_text_style(root).pos(Pos::new(HPos::Right, VPos::Bottom));
        let log = if matches!(scale, ColourScale::Log { .. }) { ", log scale" } else { "" };
        root.draw(&Text::new(format!("{}{log}", self.value_label), (width as i32 - 15, top - 14), caption)).map_err(text_error)
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
    fn size(&self) -> (u32, u32) {
        height_with_legend(3)
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> DrawResult {
        let x_axis = Axis::new(self.log_x, self.points.iter().map(|p| p.0));
        let y_axis = Axis::new(self.log_y, self.points.iter().map(|p| p.1));
        let frame = Frame::new(&self.title, (&x_axis, &y_axis), (&self.x_label, &self.y_label)).legend(3);
        let mut chart = frame.draw(root)?;
        let at = |x: f64, y: f64| (x_axis.at(x), y_axis.at(y));
        let mut legend = Legend::new();
        for (meets, name, style) in [(false, "misses the goal", RGBColor(160, 160, 160)), (true, "meets the goal", color(0))] {
            chart
                .draw_series(self.points.iter().filter(|p| p.2 == meets).map(|p| Circle::new(at(p.0, p.1), 4, style.filled())))
                .map_err(text_error)?;
            legend.add(name, move |(x, y)| Circle::new((x + 12, y), 5, style.filled()));
        }
        let front: Vec<(f64, f64)> = self.front.iter().map(|p| at(p.0, p.1)).collect();
        let line = color(3).stroke_width(3);
        chart.draw_series(LineSeries_::new(front.clone(), line)).map_err(text_error)?;
        legend.add("Pareto front (nothing is both faster and cheaper)", move |(x, y)| PathElement::new([(x, y), (x + 24, y)], line));
        chart.draw_series(front.iter().map(|&p| Circle::new(p, 6, line))).map_err(text_error)?;
        // Each front point's name in a box beside it that covers no other
        // name, joined to its point by a thin line.
        let font = ("sans-serif", LABEL_SIZE - 3).into_font();
        let anchors: Vec<(i32, i32)> = front.iter().map(|p| chart.backend_coord(p)).collect();
        let sizes = self
            .front
            .iter()
            .map(|p| root.estimate_text_size(&p.2, &TextStyle::from(font.clone())).map(|(w, h)| (w as i32, h as i32)))
            .collect::<Result<Vec<_>, _>>()
            .map_err(text_error)?;
        let (x_pixels, y_pixels) = chart.plotting_area().get_pixel_range();
        let points: Vec<(i32, i32)> = self.points.iter().map(|p| chart.backend_coord(&at(p.0, p.1))).collect();
        let boxes = labels::place(&anchors, &sizes, &points, (x_pixels.start, y_pixels.start, x_pixels.end, y_pixels.end));
        let style = font.into_text_style(root).pos(Pos::new(HPos::Left, VPos::Top));
        for ((anchor, (x, y, w, h)), point) in anchors.iter().zip(&boxes).zip(&self.front) {
            if point.2.is_empty() {
                continue;
            }
            let near = (anchor.0.clamp(*x, x + w), anchor.1.clamp(*y, y + h));
            root.draw(&PathElement::new([*anchor, near], BLACK.mix(0.4).stroke_width(1))).map_err(text_error)?;
            root.draw(&Text::new(point.2.clone(), (*x, *y), style.clone())).map_err(text_error)?;
        }
        legend.draw(root, &chart, frame.x_area)
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
    fn heatmaps_colour_on_a_log_scale_where_values_span_a_decade() {
        // 437 ms to 33421 ms: a log scale, ticked at 1-2-5 (under two decades).
        let wide = ColourScale::of([437.0, 1946.0, 33421.0].into_iter());
        assert_eq!(wide, ColourScale::Log { low: 437.0, high: 33421.0 });
        assert!((wide.fraction(wide_middle()) - 0.5).abs() < 1e-9);
        assert_eq!(wide.ticks(), [500.0, 1000.0, 2000.0, 5000.0, 10000.0, 20000.0]);
        assert_eq!(ColourScale::of([2.0, 30_000.0].into_iter()).ticks(), [10.0, 100.0, 1000.0, 10000.0]);
        // Exactly a decade is a decade.
        assert!(matches!(ColourScale::of([0.05, 0.5].into_iter()), ColourScale::Log { .. }));
        // Less than a decade, or a zero among them: linear, ticked at 1-2-5 steps.
        let narrow = ColourScale::of([0.11, 0.3, 0.52].into_iter());
        assert_eq!(narrow, ColourScale::Linear { low: 0.11, high: 0.52 });
        assert!((narrow.fraction(0.315) - 0.5).abs() < 1e-9);
        let ticks: Vec<String> = narrow.ticks().iter().map(|t| number_label(*t)).collect();
        assert_eq!(ticks, ["0.2", "0.3", "0.4", "0.5"]);
        assert!(matches!(ColourScale::of([0.0, 5.0, 500.0].into_iter()), ColourScale::Linear { .. }));
        // One value: it alone is named.
        assert_eq!(ColourScale::of([3.1, 3.1].into_iter()).ticks(), [3.1]);
    }

    /// The geometric middle of 437 and 33421.
    fn wide_middle() -> f64 {
        (437f64 * 33421.0).sqrt()
    }

    #[test]
    fn the_colour_ramp_runs_from_dark_to_light() {
        assert_eq!(ramp(0.0), RGBColor(68, 1, 84));
        assert_eq!(ramp(1.0), RGBColor(253, 231, 37));
        let brightness = |c: RGBColor| u32::from(c.0) + u32::from(c.1) + u32::from(c.2);
        assert!(brightness(ramp(0.3)) < brightness(ramp(0.7)));
    }
}
