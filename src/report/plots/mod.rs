//! Figures as PNG or SVG (chosen by the file's extension) with plotters:
//! stacked bars, log-log lines with marked points, a timeline of lanes,
//! measured points against predicted lines, and (in `sweep`) a sweep's
//! curves, heatmaps and Pareto fronts. General shapes filled by the
//! caller; nothing here knows what the numbers mean. Text is drawn with the
//! DejaVu Sans font embedded in the binary (assets/fonts/, Bitstream Vera
//! licence), so plotting needs no font or graphics package on the machine.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use plotters::coord::{CoordTranslate, Shift};
use plotters::element::{DynElement, IntoDynElement};
use plotters::prelude::*;
use plotters::style::FontStyle;
use plotters::style::text_anchor::{HPos, Pos, VPos};

mod axis;
mod labels;
mod regimes;
mod sweep;

pub use axis::LogAxis;
use axis::{Axis, Ticked, number_label};
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

// ------------------------------------------------------------------ frame

/// Every chart here has f64 coordinates on both axes, ticked where its
/// `Axis` says.
type Chart<'a, DB> = ChartContext<'a, DB, Cartesian2d<Ticked, Ticked>>;

/// What a chart's frame holds: title, axes with their descriptions, the
/// room under the plot for tick labels and the x description, and what
/// goes outside the plot (legend entries below it, room at its right).
struct Frame<'f> {
    title: &'f str,
    title_size: u32,
    x: &'f Axis,
    y: &'f Axis,
    x_desc: &'f str,
    y_desc: &'f str,
    x_area: u32,
    x_grid: bool,
    legend: usize,
    right: u32,
}

impl<'f> Frame<'f> {
    /// A frame in the house style: a long title set smaller rather than
    /// cut off, room for one line of tick labels, no legend.
    fn new(title: &'f str, (x, y): (&'f Axis, &'f Axis), (x_desc, y_desc): (&'f str, &'f str)) -> Frame<'f> {
        let title_size = (TITLE_SIZE * 72 / (title.chars().count() as u32).max(72)).max(14);
        Frame { title, title_size, x, y, x_desc, y_desc, x_area: X_AREA, x_grid: true, legend: 0, right: 0 }
    }

    fn legend(self, entries: usize) -> Frame<'f> {
        Frame { legend: entries, ..self }
    }

    /// The chart on `root`, with its grid, ticks and descriptions drawn.
    fn draw<'a, DB: DrawingBackend>(&self, root: &'a DrawingArea<DB, Shift>) -> Result<Chart<'a, DB>, String> {
        let mut chart = ChartBuilder::on(root)
            .caption(self.title, ("sans-serif", self.title_size))
            .margin(20)
            .margin_right(45 + self.right)
            .margin_bottom(20 + legend_height(self.legend))
            .x_label_area_size(self.x_area)
            .y_label_area_size(85)
            .build_cartesian_2d(Ticked::from(self.x), Ticked::from(self.y))
            .map_err(text_error)?;
        let (x, y) = (self.x, self.y);
        let (x_format, y_format) = (move |v: &f64| x.label(*v), move |v: &f64| y.label(*v));
        let mut mesh = chart.configure_mesh();
        mesh.x_labels(x.ticks.len().max(1))
            .y_labels(y.ticks.len().max(1))
            .x_label_formatter(&x_format)
            .y_label_formatter(&y_format)
            .x_desc(self.x_desc)
            .y_desc(self.y_desc)
            .label_style(("sans-serif", LABEL_SIZE))
            .axis_desc_style(("sans-serif", AXIS_DESC_SIZE))
            .light_line_style(WHITE);
        if !self.x_grid {
            mesh.disable_x_mesh();
        }
        mesh.draw().map_err(text_error)?;
        Ok(chart)
    }
}

/// Room under a plot for one line of tick labels and the x description.
const X_AREA: u32 = 55;

/// The height a legend of `entries` lines takes below a plot.
fn legend_height(entries: usize) -> u32 {
    if entries == 0 { 0 } else { 24 + LEGEND_LINE * entries as u32 }
}

const LEGEND_LINE: u32 = 22;

/// The height of a figure whose legend of `entries` lines sits below it.
fn height_with_legend(entries: usize) -> (u32, u32) {
    (SIZE.0, SIZE.1 + legend_height(entries))
}

/// A legend drawn below a plot and its x axis, where it covers no data:
/// each entry glyphs (drawn from the entry's left middle) and a name.
struct Legend<'g, DB: DrawingBackend> {
    entries: Vec<(String, Vec<Glyph<'g, DB>>)>,
}

type Glyph<'g, DB> = Box<dyn Fn((i32, i32)) -> DynElement<'static, DB, (i32, i32)> + 'g>;

impl<'g, DB: DrawingBackend> Legend<'g, DB> {
    fn new() -> Self {
        Legend { entries: Vec::new() }
    }

    fn add<E: IntoDynElement<'static, DB, (i32, i32)>>(
        &mut self,
        name: impl Into<String>,
        glyph: impl Fn((i32, i32)) -> E + 'g,
    ) -> &mut Self {
        self.entries.push((name.into(), vec![Box::new(move |at| glyph(at).into_dyn())]));
        self
    }

    /// One more glyph over the last entry's.
    fn also<E: IntoDynElement<'static, DB, (i32, i32)>>(&mut self, glyph: impl Fn((i32, i32)) -> E + 'g) {
        if let Some((_, glyphs)) = self.entries.last_mut() {
            glyphs.push(Box::new(move |at| glyph(at).into_dyn()));
        }
    }

    /// Draws the entries in a box on `area`, under `chart`'s plot and the
    /// `x_area` below it.
    fn draw<CT: CoordTranslate>(&self, area: &DrawingArea<DB, Shift>, chart: &ChartContext<'_, DB, CT>, x_area: u32) -> DrawResult {
        if self.entries.is_empty() {
            return Ok(());
        }
        let (x_pixels, y_pixels) = chart.plotting_area().get_pixel_range();
        let (base_x, base_y) = area.get_base_pixel();
        let (left, top) = (x_pixels.start - base_x, y_pixels.end - base_y + x_area as i32 + 8);
        let style = ("sans-serif", LABEL_SIZE).into_font().into_text_style(area).pos(Pos::new(HPos::Left, VPos::Center));
        let widest = self
            .entries
            .iter()
            .map(|(name, _)| area.estimate_text_size(name, &style).map(|(w, _)| w as i32))
            .collect::<Result<Vec<_>, _>>()
            .map_err(text_error)?
            .into_iter()
            .max()
            .unwrap_or(0);
        let line = LEGEND_LINE as i32;
        let (width, height) = (widest + 60, legend_height(self.entries.len()) as i32 - 12);
        area.draw(&Rectangle::new([(left, top), (left + width, top + height)], BLACK.mix(0.4))).map_err(text_error)?;
        for (i, (name, glyphs)) in self.entries.iter().enumerate() {
            let y = top + 6 + line / 2 + line * i as i32;
            for glyph in glyphs {
                area.draw(&glyph((left + 10, y))).map_err(text_error)?;
            }
            area.draw(&Text::new(name.clone(), (left + 46, y), style.clone())).map_err(text_error)?;
        }
        Ok(())
    }
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
    fn size(&self) -> (u32, u32) {
        height_with_legend(self.segments.len())
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> DrawResult {
        let n = self.categories.len();
        let totals: Vec<f64> = (0..n).map(|i| self.segments.iter().map(|s| s.values.get(i).copied().unwrap_or(0.0)).sum()).collect();
        // Headroom above the tallest bar for its total.
        let top = totals.iter().copied().fold(0.0, f64::max).max(f64::MIN_POSITIVE) * 1.1;
        let lines = self.categories.iter().map(|c| c.lines().count()).max().unwrap_or(1) as u32;
        let x_axis = Axis::categories(&vec![String::new(); n]);
        let y_axis = Axis::linear([0.0, top].into_iter());
        let mut frame = Frame::new(&self.title, (&x_axis, &y_axis), (&self.x_label, &self.y_label)).legend(self.segments.len());
        frame.x_area = 20 + 22 * lines + AXIS_DESC_SIZE + 10;
        frame.x_grid = false;
        let mut chart = frame.draw(root)?;
        // Category names under their bars, one text a line.
        let centered = ("sans-serif", LABEL_SIZE).into_font().into_text_style(root).pos(Pos::new(HPos::Center, VPos::Top));
        for (i, category) in self.categories.iter().enumerate() {
            let (x, y) = chart.backend_coord(&(i as f64, 0.0));
            for (k, line) in category.lines().enumerate() {
                root.draw(&Text::new(line.to_string(), (x, y + 8 + 22 * k as i32), centered.clone())).map_err(text_error)?;
            }
        }
        let mut base = vec![0.0; n];
        let mut legend = Legend::new();
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
            chart.draw_series(bars).map_err(text_error)?;
            legend.add(&segment.name, move |(x, y)| Rectangle::new([(x, y - 7), (x + 16, y + 7)], fill));
        }
        let labels = totals.iter().enumerate().map(|(i, total)| {
            Text::new(
                format!("{total:.2} {}", self.total_unit),
                (i as f64, total + top * 0.015),
                ("sans-serif", LABEL_SIZE).into_font().into_text_style(root).pos(Pos::new(HPos::Center, VPos::Bottom)),
            )
        });
        chart.draw_series(labels).map_err(text_error)?;
        legend.draw(root, &chart, frame.x_area)
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

impl LogLogLines {
    fn marks_named(&self) -> bool {
        !self.marked_label.is_empty() && self.series.iter().any(|s| !s.marked.is_empty())
    }

    fn legend_entries(&self) -> usize {
        self.series.len() + usize::from(self.marks_named())
    }
}

impl Figure for LogLogLines {
    fn size(&self) -> (u32, u32) {
        height_with_legend(self.legend_entries())
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> DrawResult {
        let points = || self.series.iter().flat_map(|s| s.points.iter().chain(&s.marked));
        let x_axis = Axis::log(self.x_axis, points().map(|p| p.0).chain(self.guides.iter().map(|g| g.0)));
        let y_axis = Axis::log(LogAxis::Decimal, points().map(|p| p.1));
        let frame = Frame::new(&self.title, (&x_axis, &y_axis), (&self.x_label, &self.y_label)).legend(self.legend_entries());
        let mut chart = frame.draw(root)?;
        let to_axis = |&(x, y): &(f64, f64)| (x_axis.at(x), y_axis.at(y));
        let y_range = y_axis.range.clone();
        for (x, label) in &self.guides {
            let x = x_axis.at(*x);
            let dash = DashedLineSeries::new([(x, y_range.start), (x, y_range.end)], 8, 6, BLACK.mix(0.5).stroke_width(2));
            chart.draw_series(dash).map_err(text_error)?;
            let style = ("sans-serif", LABEL_SIZE).into_font().into_text_style(root).pos(Pos::new(HPos::Left, VPos::Top));
            let below_top = y_range.end - 0.02 * (y_range.end - y_range.start);
            chart.draw_series([Text::new(format!(" {label}"), (x, below_top), style)]).map_err(text_error)?;
        }
        let mut legend = Legend::new();
        for (s, series) in self.series.iter().enumerate() {
            draw_dotted_line(&mut chart, &mut legend, s, &series.name, series.points.iter().map(to_axis), 3)?;
            // A coloured triangle with a black rim: a black one under a smaller one.
            for (size, fill) in [(13, BLACK), (9, color(s))] {
                chart
                    .draw_series(series.marked.iter().map(|p| TriangleMarker::new(to_axis(p), size, fill.filled())))
                    .map_err(text_error)?;
            }
        }
        if self.marks_named() {
            legend.add(&self.marked_label, |(x, y)| TriangleMarker::new((x + 12, y), 11, BLACK.filled()));
        }
        legend.draw(root, &chart, frame.x_area)
    }
}

/// plotters' line series, renamed so it does not clash with ours.
use plotters::series::LineSeries as LineSeries_;

/// Series `s`'s line in its colour with a dot at every point, named in the
/// legend.
fn draw_dotted_line<'a, DB: DrawingBackend + 'a>(
    chart: &mut Chart<'a, DB>,
    legend: &mut Legend<'_, DB>,
    s: usize,
    name: &str,
    points: impl Iterator<Item = (f64, f64)> + Clone,
    radius: i32,
) -> DrawResult {
    let line = color(s).stroke_width(3);
    chart.draw_series(LineSeries_::new(points.clone(), line)).map_err(text_error)?;
    legend.add(name, move |(x, y)| PathElement::new([(x, y), (x + 24, y)], line));
    chart.draw_series(points.map(|p| Circle::new(p, radius, color(s).filled()))).map_err(text_error)?;
    Ok(())
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
        (SIZE.0, (140 + 110 * self.panels.len() + 26 * lanes).max(400) as u32 + legend_height(self.kinds.len()))
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
        let panels_height = f64::from(body_height.saturating_sub(legend_height(self.kinds.len())));
        let time = Axis::linear([0.0, end].into_iter());
        let mut rest = body;
        for (index, panel) in self.panels.iter().enumerate() {
            let height = (panels_height * heights[index] / total) as u32;
            // The last panel holds the legend, below its time axis.
            let last = index + 1 == self.panels.len();
            let (area, below) = if last { (rest.clone(), rest.clone()) } else { rest.split_vertically(height) };
            self.draw_panel(&area, panel, &time, last)?;
            rest = below;
        }
        Ok(())
    }
}

impl Timeline {
    fn draw_panel<DB: DrawingBackend>(
        &self,
        area: &DrawingArea<DB, Shift>,
        panel: &TimelinePanel,
        time: &Axis,
        with_legend: bool,
    ) -> DrawResult {
        let lanes = panel.lanes.len();
        // Lane 0 is drawn at the top.
        let names: Vec<String> = panel.lanes.iter().rev().map(|l| l.name.clone()).collect();
        let lane_axis = Axis::categories(&names);
        let mut frame = Frame::new(&panel.title, (time, &lane_axis), (&self.x_label, ""));
        frame.title_size = AXIS_DESC_SIZE;
        frame.x_area = 50;
        if with_legend {
            frame.legend = self.kinds.len();
        }
        let mut chart = frame.draw(area)?;
        let mut legend = Legend::new();
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
            chart.draw_series(rects).map_err(text_error)?;
            if with_legend {
                legend.add(&kind.name, move |(x, y)| Rectangle::new([(x, y - 7), (x + 16, y + 7)], fill));
            }
        }
        legend.draw(area, &chart, frame.x_area)
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
    fn size(&self) -> (u32, u32) {
        height_with_legend(2 * self.series.len())
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> DrawResult {
        let points = || self.series.iter().flat_map(|s| s.measured.iter().chain(&s.predicted));
        let x_axis = Axis::log(self.x_axis, points().map(|p| p.0));
        let y_axis = Axis::log(LogAxis::Decimal, points().map(|p| p.1));
        let frame = Frame::new(&self.title, (&x_axis, &y_axis), (&self.x_label, &self.y_label)).legend(2 * self.series.len());
        let mut chart = frame.draw(root)?;
        let to_log = |&(x, y): &(f64, f64)| (x_axis.at(x), y_axis.at(y));
        let mut legend = Legend::new();
        for (s, series) in self.series.iter().enumerate() {
            let line = color(s).stroke_width(2);
            let mut predicted = series.predicted.clone();
            predicted.sort_by(|a, b| a.0.total_cmp(&b.0));
            chart.draw_series(LineSeries_::new(predicted.iter().map(to_log), line)).map_err(text_error)?;
            legend.add(format!("{} predicted", series.name), move |(x, y)| PathElement::new([(x, y), (x + 24, y)], line));
            chart.draw_series(series.measured.iter().map(|p| Circle::new(to_log(p), 5, color(s).stroke_width(2)))).map_err(text_error)?;
            legend.add(format!("{} measured", series.name), move |(x, y)| Circle::new((x + 12, y), 5, color(s).stroke_width(2)));
        }
        legend.draw(root, &chart, frame.x_area)
    }
}

#[cfg(test)]
mod tests;
