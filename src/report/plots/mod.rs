//! Figures as PNG or SVG (chosen by the file's extension) with plotters:
//! stacked bars, log-log lines with marked points, a timeline of lanes,
//! measured points against predicted lines, and (in `sweep`) a sweep's
//! curves, heatmaps and Pareto fronts. General shapes filled by the
//! caller; nothing here knows what the numbers mean. Text is drawn with the
//! DejaVu Sans font embedded in the binary (assets/fonts/, Bitstream Vera
//! licence), so plotting needs no font or graphics package on the machine.

use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::FontStyle;
use plotters::style::text_anchor::{HPos, Pos, VPos};

mod axis;
mod regimes;
mod sweep;

pub use axis::LogAxis;
use axis::number_label;
pub use regimes::{RegimeLines, RegimeSeries, regime_lines};
pub use sweep::{Bound, Curve, Curves, Heatmap, Mark, Pareto, XScale, curves, heatmap, pareto};

const FONT: &[u8] = include_bytes!("../../../assets/fonts/DejaVuSans.ttf");

/// Registers the embedded font as plotters' "sans-serif" (once).
fn register_font() -> Result<(), String> {
    static REGISTERED: OnceLock<Result<(), String>> = OnceLock::new();
    REGISTERED
        .get_or_init(|| {
            plotters::style::register_font("sans-serif", FontStyle::Normal, FONT)
                .map_err(|_| "the embedded DejaVu Sans font cannot be read".to_string())
        })
        .clone()
}

/// A figure that could not be written.
#[derive(Debug, thiserror::Error)]
#[error("cannot draw {}: {message}", path.display())]
pub struct PlotError {
    pub path: PathBuf,
    pub message: String,
}

/// Colours that stay apart when printed and for common colour blindness
/// (Okabe and Ito), then greys.
const PALETTE: [RGBColor; 8] = [
    RGBColor(0, 114, 178),
    RGBColor(230, 159, 0),
    RGBColor(0, 158, 115),
    RGBColor(213, 94, 0),
    RGBColor(86, 180, 233),
    RGBColor(204, 121, 167),
    RGBColor(240, 228, 66),
    RGBColor(100, 100, 100),
];

/// The `index`th colour of the palette (it wraps around).
pub fn color(index: usize) -> RGBColor {
    PALETTE[index % PALETTE.len()]
}

const SIZE: (u32, u32) = (1100, 650);
const TITLE_SIZE: u32 = 26;
const LABEL_SIZE: u32 = 17;
const AXIS_DESC_SIZE: u32 = 19;

type DrawResult = Result<(), String>;

fn text_error<E: std::fmt::Display>(error: E) -> String {
    error.to_string()
}

/// Something that draws itself on any plotters backend.
trait Figure {
    fn size(&self) -> (u32, u32) {
        SIZE
    }
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> DrawResult;
}

/// The format a figure at `path` is written in, told by its extension:
/// "png" or "svg"; any other is refused, saying which are allowed.
pub fn figure_format(path: &Path) -> Result<&'static str, String> {
    match path.extension().and_then(|e| e.to_str()).unwrap_or("") {
        "png" => Ok("png"),
        "svg" => Ok("svg"),
        other => Err(format!("unknown figure format {other:?}: use a .png or .svg file name")),
    }
}

/// Writes `figure` to `path` whole (see `report::files`): PNG for `.png`,
/// SVG for `.svg`.
fn save<F: Figure>(figure: &F, path: &Path) -> Result<(), PlotError> {
    let error = |message: String| PlotError { path: path.to_path_buf(), message };
    register_font().map_err(error)?;
    let size = figure.size();
    let extension = figure_format(path).map_err(error)?;
    super::files::replace(
        path,
        |temporary| {
            if extension == "png" {
                draw_on(figure, &BitMapBackend::new(temporary, size).into_drawing_area())
            } else {
                draw_on(figure, &SVGBackend::new(temporary, size).into_drawing_area())
            }
        },
        |e| e.to_string(),
    )
    .map_err(error)
}

fn draw_on<F: Figure, DB: DrawingBackend>(figure: &F, root: &DrawingArea<DB, Shift>) -> DrawResult {
    root.fill(&WHITE).map_err(text_error)?;
    figure.draw(root)?;
    root.present().map_err(text_error)
}

// ------------------------------------------------------------------ stacked bars

/// One layer of every bar.
#[derive(Debug, Clone)]
pub struct BarSegment {
    pub name: String,
    /// One value per category, in category order.
    pub values: Vec<f64>,
}

/// Bars made of stacked segments, one bar per category, with its total
/// written above it. A category name may hold several lines ("a\nb").
#[derive(Debug, Clone)]
pub struct StackedBars {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub categories: Vec<String>,
    pub segments: Vec<BarSegment>,
    /// Unit printed after each bar's total ("s").
    pub total_unit: String,
}

pub fn stacked_bars(chart: &StackedBars, path: &Path) -> Result<(), PlotError> {
    save(chart, path)
}

impl Figure for StackedBars {
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> DrawResult {
        let n = self.categories.len();
        let totals: Vec<f64> = (0..n).map(|i| self.segments.iter().map(|s| s.values.get(i).copied().unwrap_or(0.0)).sum()).collect();
        // Headroom above the tallest bar for its total and the legend.
        let top = totals.iter().copied().fold(0.0, f64::max).max(f64::MIN_POSITIVE) * 1.35;
        let lines = self.categories.iter().map(|c| c.lines().count()).max().unwrap_or(1) as u32;
        let mut chart = ChartBuilder::on(root)
            .caption(&self.title, ("sans-serif", TITLE_SIZE))
            .margin(20)
            .x_label_area_size(20 + 22 * lines + AXIS_DESC_SIZE + 10)
            .y_label_area_size(80)
            .build_cartesian_2d(-0.5..(n as f64 - 0.5), 0.0..top)
            .map_err(text_error)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(0)
            .x_desc(&self.x_label)
            .y_desc(&self.y_label)
            .light_line_style(WHITE)
            .label_style(("sans-serif", LABEL_SIZE))
            .axis_desc_style(("sans-serif", AXIS_DESC_SIZE))
            .draw()
            .map_err(text_error)?;
        // Category names under their bars, one text a line.
        let centered = ("sans-serif", LABEL_SIZE).into_font().into_text_style(root).pos(Pos::new(HPos::Center, VPos::Top));
        for (i, category) in self.categories.iter().enumerate() {
            let (x, y) = chart.backend_coord(&(i as f64, 0.0));
            for (k, line) in category.lines().enumerate() {
                root.draw(&Text::new(line.to_string(), (x, y + 8 + 22 * k as i32), centered.clone())).map_err(text_error)?;
            }
        }
        let mut base = vec![0.0; n];
        for (s, segment) in self.segments.iter().enumerate() {
            let fill = color(s).filled();
            let bars: Vec<Rectangle<(f64, f64)>> = (0..n)
                .map(|i| {
                    let value = segment.values.get(i).copied().unwrap_or(0.0);
                    let bar = Rectangle::new([(i as f64 - 0.3, base[i]), (i as f64 + 0.3, base[i] + value)], fill);
                    base[i] += value;
                    bar
                })
                .collect();
            chart
                .draw_series(bars)
                .map_err(text_error)?
                .label(&segment.name)
                .legend(move |(x, y)| Rectangle::new([(x, y - 7), (x + 16, y + 7)], fill));
        }
        let labels = totals.iter().enumerate().map(|(i, total)| {
            Text::new(
                format!("{total:.2} {}", self.total_unit),
                (i as f64, total + top * 0.015),
                ("sans-serif", LABEL_SIZE).into_font().into_text_style(root).pos(Pos::new(HPos::Center, VPos::Bottom)),
            )
        });
        chart.draw_series(labels).map_err(text_error)?;
        draw_legend(&mut chart, SeriesLabelPosition::UpperLeft)
    }
}

// ------------------------------------------------------------------ log-log lines

/// A line through `points`, with some of them marked.
#[derive(Debug, Clone)]
pub struct LineSeries {
    pub name: String,
    pub points: Vec<(f64, f64)>,
    /// Points drawn as large markers on the line (for example the sizes a
    /// workload really uses).
    pub marked: Vec<(f64, f64)>,
}

/// Lines on log-log axes, with vertical guides at chosen x values.
#[derive(Debug, Clone)]
pub struct LogLogLines {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub x_axis: LogAxis,
    pub series: Vec<LineSeries>,
    /// Dashed vertical lines, labelled at the top.
    pub guides: Vec<(f64, String)>,
    /// What the large markers mean, for the legend.
    pub marked_label: String,
}

pub fn log_log_lines(chart: &LogLogLines, path: &Path) -> Result<(), PlotError> {
    save(chart, path)
}

impl Figure for LogLogLines {
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> DrawResult {
        let points = || self.series.iter().flat_map(|s| s.points.iter().chain(&s.marked));
        let (x_range, x_labels) = self.x_axis.range(points().map(|p| p.0).chain(self.guides.iter().map(|g| g.0)));
        let (y_range, y_labels) = LogAxis::Decimal.range(points().map(|p| p.1));
        let x_axis = self.x_axis;
        let mut chart =
            log_log_chart(root, &self.title, x_axis, (x_range, x_labels), (y_range.clone(), y_labels), (&self.x_label, &self.y_label))?;
        let to_log = |&(x, y): &(f64, f64)| (x_axis.to_axis(x), y.log10());
        for (x, label) in &self.guides {
            let x = x_axis.to_axis(*x);
            let dash = DashedLineSeries::new([(x, y_range.start), (x, y_range.end)], 8, 6, BLACK.mix(0.5).stroke_width(2));
            chart.draw_series(dash).map_err(text_error)?;
            let style = ("sans-serif", LABEL_SIZE).into_font().into_text_style(root).pos(Pos::new(HPos::Left, VPos::Top));
            let below_top = y_range.end - 0.02 * (y_range.end - y_range.start);
            chart.draw_series([Text::new(format!(" {label}"), (x, below_top), style)]).map_err(text_error)?;
        }
        for (s, series) in self.series.iter().enumerate() {
            draw_dotted_line(&mut chart, s, &series.name, series.points.iter().map(to_log), 3)?;
            // A coloured triangle with a black rim: a black one under a smaller one.
            for (size, fill) in [(13, BLACK), (9, color(s))] {
                chart.draw_series(series.marked.iter().map(|p| TriangleMarker::new(to_log(p), size, fill.filled()))).map_err(text_error)?;
            }
        }
        if !self.marked_label.is_empty() && self.series.iter().any(|s| !s.marked.is_empty()) {
            chart
                .draw_series(std::iter::empty::<Circle<(f64, f64), u32>>())
                .map_err(text_error)?
                .label(&self.marked_label)
                .legend(|(x, y)| TriangleMarker::new((x + 12, y), 11, BLACK.filled()));
        }
        draw_legend(&mut chart, SeriesLabelPosition::LowerRight)
    }
}

/// plotters' line series, renamed so it does not clash with ours.
use plotters::series::LineSeries as LineSeries_;

/// Every chart here has f64 coordinates on both axes.
type LogChart<'a, DB> = ChartContext<'a, DB, Cartesian2d<plotters::coord::types::RangedCoordf64, plotters::coord::types::RangedCoordf64>>;

/// The legend of a chart's labelled series, in a translucent box.
fn draw_legend<'a, DB: DrawingBackend + 'a>(chart: &mut LogChart<'a, DB>, position: SeriesLabelPosition) -> DrawResult {
    chart
        .configure_series_labels()
        .position(position)
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK.mix(0.4))
        .label_font(("sans-serif", LABEL_SIZE))
        .draw()
        .map_err(text_error)
}

/// A chart on log axes (x as `x_axis` says, y in powers of ten), with its
/// title, axis labels and grid drawn: (range, label count) per axis and the
/// (x, y) axis descriptions.
fn log_log_chart<'a, DB: DrawingBackend>(
    root: &'a DrawingArea<DB, Shift>,
    title: &str,
    x_axis: LogAxis,
    (x_range, x_labels): (Range<f64>, usize),
    (y_range, y_labels): (Range<f64>, usize),
    (x_desc, y_desc): (&str, &str),
) -> Result<LogChart<'a, DB>, String> {
    let mut chart = ChartBuilder::on(root)
        .caption(title, ("sans-serif", TITLE_SIZE))
        .margin(20)
        .x_label_area_size(55)
        .y_label_area_size(85)
        .build_cartesian_2d(x_range, y_range)
        .map_err(text_error)?;
    let x_format = move |x: &f64| x_axis.label(*x);
    let y_format = |y: &f64| LogAxis::Decimal.label(*y);
    draw_grid(&mut chart, (x_labels, &x_format), (y_labels, &y_format), (x_desc, y_desc))?;
    Ok(chart)
}

/// Series `s`'s line in its colour with a dot at every point, named in the
/// legend.
fn draw_dotted_line<'a, DB: DrawingBackend + 'a>(
    chart: &mut LogChart<'a, DB>,
    s: usize,
    name: &str,
    points: impl Iterator<Item = (f64, f64)> + Clone,
    radius: i32,
) -> DrawResult {
    let line = color(s).stroke_width(3);
    chart
        .draw_series(LineSeries_::new(points.clone(), line))
        .map_err(text_error)?
        .label(name)
        .legend(move |(x, y)| PathElement::new([(x, y), (x + 24, y)], line));
    chart.draw_series(points.map(|p| Circle::new(p, radius, color(s).filled()))).map_err(text_error)?;
    Ok(())
}

/// A chart's grid, tick labels (how many, and how they read) and axis
/// descriptions, in the house style.
fn draw_grid<'a, DB: DrawingBackend + 'a>(
    chart: &mut LogChart<'a, DB>,
    (x_labels, x_format): (usize, &dyn Fn(&f64) -> String),
    (y_labels, y_format): (usize, &dyn Fn(&f64) -> String),
    (x_desc, y_desc): (&str, &str),
) -> DrawResult {
    chart
        .configure_mesh()
        .x_labels(x_labels)
        .y_labels(y_labels)
        .x_label_formatter(&x_format)
        .y_label_formatter(&y_format)
        .x_desc(x_desc)
        .y_desc(y_desc)
        .label_style(("sans-serif", LABEL_SIZE))
        .axis_desc_style(("sans-serif", AXIS_DESC_SIZE))
        .light_line_style(WHITE)
        .draw()
        .map_err(text_error)
}

// ------------------------------------------------------------------ timeline

/// A kind of span: its name in the legend and how tall it is drawn (a
/// fraction of the lane), so that shorter kinds can sit on taller ones.
#[derive(Debug, Clone)]
pub struct SpanKind {
    pub name: String,
    pub height: f64,
    pub color: RGBColor,
}

/// One lane: spans `(start, end, kind)`, drawn in order.
#[derive(Debug, Clone)]
pub struct Lane {
    pub name: String,
    pub spans: Vec<(f64, f64, usize)>,
}

#[derive(Debug, Clone)]
pub struct TimelinePanel {
    pub title: String,
    pub lanes: Vec<Lane>,
}

/// Panels of lanes above each other on one shared time axis.
#[derive(Debug, Clone)]
pub struct Timeline {
    pub title: String,
    pub x_label: String,
    pub kinds: Vec<SpanKind>,
    pub panels: Vec<TimelinePanel>,
}

pub fn timeline(chart: &Timeline, path: &Path) -> Result<(), PlotError> {
    save(chart, path)
}

impl Figure for Timeline {
    fn size(&self) -> (u32, u32) {
        let lanes: usize = self.panels.iter().map(|p| p.lanes.len()).sum();
        (SIZE.0, (140 + 110 * self.panels.len() + 26 * lanes).max(400) as u32)
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> DrawResult {
        let end = self.panels.iter().flat_map(|p| &p.lanes).flat_map(|l| &l.spans).map(|s| s.1).fold(0.0, f64::max).max(f64::MIN_POSITIVE);
        let (title_area, body) = root.split_vertically(50);
        title_area
            .titled(&self.title, ("sans-serif", TITLE_SIZE).into_font().into_text_style(root).pos(Pos::new(HPos::Center, VPos::Top)))
            .map_err(text_error)?;
        let heights: Vec<f64> = self.panels.iter().map(|p| 110.0 + 26.0 * p.lanes.len() as f64).collect();
        let total: f64 = heights.iter().sum();
        let (_, body_height) = body.dim_in_pixel();
        let mut rest = body;
        for (index, panel) in self.panels.iter().enumerate() {
            let height = (f64::from(body_height) * heights[index] / total) as u32;
            let (area, below) = if index + 1 < self.panels.len() { rest.split_vertically(height) } else { (rest.clone(), rest.clone()) };
            self.draw_panel(&area, panel, end, index == 0)?;
            rest = below;
        }
        Ok(())
    }
}

impl Timeline {
    fn draw_panel<DB: DrawingBackend>(&self, area: &DrawingArea<DB, Shift>, panel: &TimelinePanel, end: f64, legend: bool) -> DrawResult {
        let lanes = panel.lanes.len();
        let names: Vec<String> = panel.lanes.iter().map(|l| l.name.clone()).collect();
        let lane_label = move |y: &f64| {
            let index = y.round();
            if (y - index).abs() < 1e-6 && index >= 0.0 {
                // Lane 0 is drawn at the top.
                names.get(lanes.saturating_sub(1 + index as usize)).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        };
        let mut chart = ChartBuilder::on(area)
            .caption(&panel.title, ("sans-serif", AXIS_DESC_SIZE))
            .margin(15)
            .margin_right(25)
            .x_label_area_size(50)
            .y_label_area_size(80)
            .build_cartesian_2d(0.0..end * 1.02, -0.6..(lanes as f64 - 0.4))
            .map_err(text_error)?;
        chart
            .configure_mesh()
            .disable_y_mesh()
            .y_labels(lanes + 1)
            .y_label_formatter(&lane_label)
            .light_line_style(WHITE)
            .x_desc(&self.x_label)
            .label_style(("sans-serif", LABEL_SIZE))
            .axis_desc_style(("sans-serif", AXIS_DESC_SIZE))
            .draw()
            .map_err(text_error)?;
        for (k, kind) in self.kinds.iter().enumerate() {
            let half = kind.height / 2.0;
            let fill = kind.color.filled();
            let rects = panel.lanes.iter().enumerate().flat_map(|(i, lane)| {
                let y = (lanes - 1 - i) as f64;
                lane.spans
                    .iter()
                    .filter(move |s| s.2 == k)
                    .map(move |&(start, stop, _)| Rectangle::new([(start, y - half), (stop, y + half)], fill))
            });
            let series = chart.draw_series(rects).map_err(text_error)?;
            if legend {
                series.label(&kind.name).legend(move |(x, y)| Rectangle::new([(x, y - 7), (x + 16, y + 7)], fill));
            }
        }
        if legend {
            draw_legend(&mut chart, SeriesLabelPosition::LowerRight)?;
        }
        Ok(())
    }
}

// ------------------------------------------------------------------ measured vs predicted

/// Measurements and the model's predictions of one series.
#[derive(Debug, Clone)]
pub struct MeasuredSeries {
    pub name: String,
    pub measured: Vec<(f64, f64)>,
    pub predicted: Vec<(f64, f64)>,
}

/// Measured points and predicted lines, per series, on log-log axes.
#[derive(Debug, Clone)]
pub struct MeasuredVsPredicted {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub x_axis: LogAxis,
    pub series: Vec<MeasuredSeries>,
}

pub fn measured_vs_predicted(chart: &MeasuredVsPredicted, path: &Path) -> Result<(), PlotError> {
    save(chart, path)
}

impl Figure for MeasuredVsPredicted {
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> DrawResult {
        let points = || self.series.iter().flat_map(|s| s.measured.iter().chain(&s.predicted));
        let (x_range, x_labels) = self.x_axis.range(points().map(|p| p.0));
        let (y_range, y_labels) = LogAxis::Decimal.range(points().map(|p| p.1));
        let x_axis = self.x_axis;
        let mut chart = log_log_chart(root, &self.title, x_axis, (x_range, x_labels), (y_range, y_labels), (&self.x_label, &self.y_label))?;
        let to_log = move |&(x, y): &(f64, f64)| (x_axis.to_axis(x), y.log10());
        for (s, series) in self.series.iter().enumerate() {
            let line = color(s).stroke_width(2);
            let mut predicted = series.predicted.clone();
            predicted.sort_by(|a, b| a.0.total_cmp(&b.0));
            chart
                .draw_series(LineSeries_::new(predicted.iter().map(to_log), line))
                .map_err(text_error)?
                .label(format!("{} predicted", series.name))
                .legend(move |(x, y)| PathElement::new([(x, y), (x + 24, y)], line));
            chart
                .draw_series(series.measured.iter().map(|p| Circle::new(to_log(p), 5, color(s).stroke_width(2))))
                .map_err(text_error)?
                .label(format!("{} measured", series.name))
                .legend(move |(x, y)| Circle::new((x + 12, y), 5, color(s).stroke_width(2)));
        }
        draw_legend(&mut chart, SeriesLabelPosition::UpperLeft)
    }
}

#[cfg(test)]
mod tests;
