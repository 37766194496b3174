//! Plots: value against message size, log-log, one line per
//! implementation, as SVG and PNG (plotters).
//!
//! The PNG needs a TrueType font for its text: `OXMPI_BENCH_FONT`, or
//! DejaVu Sans / Liberation Sans where Debian puts them. Without one the
//! PNGs are skipped with a message; the SVGs name their font and need none.

use std::path::{Path, PathBuf};

use plotters::coord::Shift;
use plotters::prelude::*;

use crate::compare::Impl;
use crate::report::{fmt_size, Table};

const FONTS: [&str; 4] = [
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
];

/// Registers a TrueType font for the PNGs; false when none is found.
fn font() -> bool {
    static DONE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *DONE.get_or_init(|| {
        let mut paths: Vec<PathBuf> = std::env::var_os("OXMPI_BENCH_FONT")
            .map(PathBuf::from)
            .into_iter()
            .collect();
        paths.extend(FONTS.iter().map(PathBuf::from));
        for p in paths {
            if let Ok(bytes) = std::fs::read(&p) {
                let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
                if plotters::style::register_font("sans-serif", FontStyle::Normal, bytes).is_ok() {
                    return true;
                }
            }
        }
        false
    })
}

/// One line of a plot.
pub struct Line {
    /// Implementation key.
    pub name: String,
    /// `(size, value)` with size > 0.
    pub points: Vec<(f64, f64)>,
}

fn palette(i: usize) -> RGBColor {
    const C: [RGBColor; 6] = [
        RGBColor(214, 39, 40),
        RGBColor(255, 127, 14),
        RGBColor(31, 119, 180),
        RGBColor(44, 160, 44),
        RGBColor(148, 103, 189),
        RGBColor(140, 86, 75),
    ];
    C[i % C.len()]
}

fn draw<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    title: &str,
    ylabel: &str,
    lines: &[Line],
) -> Result<(), String> {
    let e = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    root.fill(&WHITE).map_err(e)?;
    let pts = lines.iter().flat_map(|l| l.points.iter());
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    for &(x, y) in pts {
        x0 = x0.min(x);
        x1 = x1.max(x);
        y0 = y0.min(y);
        y1 = y1.max(y);
    }
    if x0 > x1 {
        return Err("nothing to plot".into());
    }
    let (x0, x1) = (x0 / 1.5, x1 * 1.5);
    let (y0, y1) = (y0 / 1.5, y1 * 1.5);
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(70)
        .build_cartesian_2d((x0..x1).log_scale(), (y0..y1).log_scale())
        .map_err(e)?;
    chart
        .configure_mesh()
        .x_desc("message size")
        .y_desc(ylabel)
        .x_label_formatter(&|x| fmt_size(x.round() as usize).replace(" ", ""))
        .y_label_formatter(&|y| {
            if *y >= 100.0 {
                format!("{y:.0}")
            } else {
                format!("{y:.2}")
            }
        })
        .draw()
        .map_err(e)?;
    for (i, l) in lines.iter().enumerate() {
        let c = palette(i);
        chart
            .draw_series(LineSeries::new(l.points.iter().copied(), c.stroke_width(2)))
            .map_err(e)?
            .label(&l.name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2)));
        chart
            .draw_series(
                l.points
                    .iter()
                    .map(|&(x, y)| Circle::new((x, y), 3, c.filled())),
            )
            .map_err(e)?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(e)?;
    root.present().map_err(e)?;
    Ok(())
}

/// Writes `name.svg` and (with a font) `name.png` under `dir`.
pub fn plot(
    dir: &Path,
    name: &str,
    title: &str,
    ylabel: &str,
    lines: &[Line],
) -> Result<(), String> {
    let svg = dir.join(format!("{name}.svg"));
    draw(
        SVGBackend::new(&svg, (900, 560)).into_drawing_area(),
        title,
        ylabel,
        lines,
    )
    .map_err(|e| format!("{}: {e}", svg.display()))?;
    if font() {
        let png = dir.join(format!("{name}.png"));
        draw(
            BitMapBackend::new(&png, (900, 560)).into_drawing_area(),
            title,
            ylabel,
            lines,
        )
        .map_err(|e| format!("{}: {e}", png.display()))?;
    }
    Ok(())
}

/// Every plot of a comparison: one per transport and test with more than
/// one size, in `out/plots/`.
pub fn all(out: &Path, transports: &[String], table: &Table, impls: &[Impl]) -> Result<(), String> {
    let dir = out.join("plots");
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    if !font() {
        eprintln!(
            "oxmpi-bench: no TrueType font found (install fonts-dejavu-core or set \
             OXMPI_BENCH_FONT): PNG plots skipped, SVG plots written"
        );
    }
    let mut tests: Vec<&String> = table.keys().map(|(_, t, _)| t).collect();
    tests.sort();
    tests.dedup();
    for tr in transports {
        for t in &tests {
            let mut unit = String::new();
            let lines: Vec<Line> = impls
                .iter()
                .map(|imp| Line {
                    name: imp.key.clone(),
                    points: table
                        .iter()
                        .filter(|((tt, ts, size), _)| tt == tr && ts == *t && *size > 0)
                        .filter_map(|((_, _, size), m)| {
                            m.get(&imp.key).map(|s| {
                                unit.clone_from(&s.unit);
                                (*size as f64, s.median)
                            })
                        })
                        .filter(|&(_, v)| v > 0.0)
                        .collect(),
                })
                .filter(|l| !l.points.is_empty())
                .collect();
            if lines.iter().all(|l| l.points.len() < 2) {
                continue;
            }
            let ylabel = match unit.as_str() {
                "us" => "latency (us)",
                "MB/s" => "bandwidth (MB/s)",
                _ => unit.as_str(),
            };
            plot(
                &dir,
                &format!("{tr}_{t}"),
                &format!("{t} over {tr}"),
                ylabel,
                &lines,
            )?;
        }
    }
    Ok(())
}
