//! Every figure kind drawn to PNG and SVG, checked as files.
use super::*;

const PNG_SIGNATURE: [u8; 8] = [0x89, b'P', b'N', b'G', b'\r', b'\n', 0x1a, b'\n'];

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("icsim-plots-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn assert_png(path: &Path) {
    let bytes = std::fs::read(path).unwrap();
    assert_eq!(bytes[..8], PNG_SIGNATURE, "{}", path.display());
    assert!(bytes.len() > 5_000, "{} is only {} bytes", path.display(), bytes.len());
}

#[test]
fn every_figure_writes_png_and_svg() {
    let dir = temp_dir("all");
    let bars = StackedBars {
        title: "Bars".into(),
        x_label: "mode".into(),
        y_label: "time (s)".into(),
        categories: vec!["a".into(), "b".into()],
        segments: vec![BarSegment { name: "x".into(), values: vec![1.0, 2.0] }, BarSegment { name: "y".into(), values: vec![0.5, 0.1] }],
        total_unit: "s".into(),
    };
    let series = |name: &str, k: f64| LineSeries {
        name: name.into(),
        points: (10..=20).map(|p| (2f64.powi(p), k * 2f64.powi(p) / 1e3)).collect(),
        marked: vec![(2f64.powi(14), k * 16.384)],
    };
    let lines = LogLogLines {
        title: "Lines".into(),
        x_label: "size".into(),
        y_label: "GB/s".into(),
        x_axis: LogAxis::Bytes,
        series: vec![series("one", 1.0), series("two", 3.0)],
        guides: vec![(16384.0, "16 KiB".into())],
        marked_label: "used".into(),
    };
    let kinds = vec![SpanKind { name: "work".into(), height: 0.8, color: color(0) }];
    let timeline_chart = Timeline {
        title: "Timeline".into(),
        x_label: "time (ms)".into(),
        kinds,
        panels: vec![TimelinePanel { title: "p".into(), lanes: vec![Lane { name: "GPU0".into(), spans: vec![(0.0, 1.0, 0)] }] }],
    };
    let measured = MeasuredVsPredicted {
        title: "Fit".into(),
        x_label: "size".into(),
        y_label: "time (us)".into(),
        x_axis: LogAxis::Bytes,
        series: vec![MeasuredSeries {
            name: "allreduce".into(),
            measured: vec![(1024.0, 10.0), (1048576.0, 40.0)],
            predicted: vec![(1048576.0, 42.0), (1024.0, 11.0)],
        }],
    };
    for extension in ["png", "svg"] {
        let path = |name: &str| dir.join(format!("{name}.{extension}"));
        stacked_bars(&bars, &path("bars")).unwrap();
        log_log_lines(&lines, &path("lines")).unwrap();
        timeline(&timeline_chart, &path("timeline")).unwrap();
        measured_vs_predicted(&measured, &path("measured")).unwrap();
    }
    for name in ["bars", "lines", "timeline", "measured"] {
        assert_png(&dir.join(format!("{name}.png")));
        let svg = std::fs::read_to_string(dir.join(format!("{name}.svg"))).unwrap();
        assert!(svg.starts_with("<svg") && svg.contains("<text"), "{name}.svg");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn an_unknown_extension_is_an_error_naming_the_file() {
    let chart = StackedBars {
        title: String::new(),
        x_label: String::new(),
        y_label: String::new(),
        categories: vec![],
        segments: vec![],
        total_unit: String::new(),
    };
    let error = stacked_bars(&chart, Path::new("chart.gif")).unwrap_err().to_string();
    assert!(error.contains("chart.gif") && error.contains(".png"), "{error}");
}
