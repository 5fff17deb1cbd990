//! PNG plots with `plotters`: latency distributions, throughput against
//! transfer size, server throughput against clients. Text is drawn with a
//! TrueType font loaded at run time (DejaVu Sans from Debian's
//! `fonts-dejavu-core`, or `VIPC_BENCH_FONT`).

use crate::error::{BenchError, Result};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::{register_font, FontStyle};
use std::path::Path;
use std::sync::OnceLock;

/// Where the font is looked for, after `$VIPC_BENCH_FONT`.
pub const FONT_PATHS: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
];

const W: u32 = 1000;
const H: u32 = 640;

fn plot_err(e: impl std::fmt::Display) -> BenchError {
    BenchError::Other(format!("plot: {e}"))
}

/// Registers the font as `sans-serif` (once per process).
pub fn load_font() -> Result<()> {
    static LOADED: OnceLock<std::result::Result<(), String>> = OnceLock::new();
    LOADED
        .get_or_init(|| {
            let mut paths: Vec<String> = std::env::var("VIPC_BENCH_FONT").into_iter().collect();
            paths.extend(FONT_PATHS.iter().map(|s| s.to_string()));
            for p in &paths {
                if let Ok(bytes) = std::fs::read(p) {
                    let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
                    if register_font("sans-serif", FontStyle::Normal, bytes).is_ok() {
                        return Ok(());
                    }
                }
            }
            Err(format!(
                "no TrueType font found (tried {}): install fonts-dejavu-core or set VIPC_BENCH_FONT",
                paths.join(", ")
            ))
        })
        .clone()
        .map_err(BenchError::Other)
}

fn canvas(path: &Path) -> Result<DrawingArea<BitMapBackend<'_>, Shift>> {
    let root = BitMapBackend::new(path, (W, H)).into_drawing_area();
    root.fill(&WHITE).map_err(plot_err)?;
    Ok(root)
}

/// The `i`th series' colour: 16 distinct ones (the latency plot has 12
/// series; with 10 colours two pairs of its lines looked alike).
fn color(i: usize) -> RGBColor {
    const C: [RGBColor; 16] = [
        RGBColor(31, 119, 180),
        RGBColor(255, 127, 14),
        RGBColor(44, 160, 44),
        RGBColor(214, 39, 40),
        RGBColor(148, 103, 189),
        RGBColor(140, 86, 75),
        RGBColor(227, 119, 194),
        RGBColor(127, 127, 127),
        RGBColor(188, 189, 34),
        RGBColor(23, 190, 207),
        RGBColor(0, 0, 0),
        RGBColor(0, 0, 128),
        RGBColor(128, 0, 0),
        RGBColor(0, 128, 128),
        RGBColor(128, 128, 0),
        RGBColor(255, 0, 255),
    ];
    C[i % C.len()]
}

/// At most `n` points of a sorted sample, as (value, cumulative fraction).
fn cdf_points(sorted: &[f64], n: usize) -> Vec<(f64, f64)> {
    let len = sorted.len();
    if len == 0 {
        return Vec::new();
    }
    let step = (len / n.max(1)).max(1);
    let mut v: Vec<(f64, f64)> = (0..len).step_by(step).map(|i| (sorted[i], (i + 1) as f64 / len as f64)).collect();
    v.push((sorted[len - 1], 1.0));
    v
}

/// Latency CDFs (µs, log scale) of every primitive.
pub fn latency_cdf(path: &Path, cdfs: &[(String, Vec<f64>)]) -> Result<()> {
    load_font()?;
    let cdfs: Vec<&(String, Vec<f64>)> = cdfs.iter().filter(|(_, v)| !v.is_empty()).collect();
    if cdfs.is_empty() {
        return Err(plot_err("no latency samples"));
    }
    let lo = cdfs.iter().map(|(_, v)| v[0]).fold(f64::INFINITY, f64::min).max(0.01) * 0.8;
    let hi = cdfs.iter().map(|(_, v)| crate::stats::quantile(v, 0.999)).fold(0.0, f64::max).max(lo * 2.0) * 1.3;
    let root = canvas(path)?;
    let mut chart = ChartBuilder::on(&root)
        .caption("Round-trip latency, 32-byte messages (CDF)", ("sans-serif", 28))
        .margin(20)
        .x_label_area_size(55)
        .y_label_area_size(70)
        .build_cartesian_2d((lo..hi).log_scale(), 0f64..1f64)
        .map_err(plot_err)?;
    chart
        .configure_mesh()
        .x_desc("latency (µs, log scale)")
        .y_desc("fraction of operations")
        .axis_desc_style(("sans-serif", 20))
        .label_style(("sans-serif", 16))
        .x_label_formatter(&|v| format!("{v:.0}"))
        .draw()
        .map_err(plot_err)?;
    for (i, (name, v)) in cdfs.iter().enumerate() {
        let c = color(i);
        let pts: Vec<(f64, f64)> = cdf_points(v, 400).into_iter().filter(|(x, _)| *x <= hi).collect();
        chart
            .draw_series(LineSeries::new(pts, c.stroke_width(2)))
            .map_err(plot_err)?
            .label(name.as_str())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(3)));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .label_font(("sans-serif", 16))
        .draw()
        .map_err(plot_err)?;
    root.present().map_err(plot_err)
}

/// A named series of (x, y) points.
pub type Series = (String, Vec<(f64, f64)>);

/// Lines with points on log–log axes (both ranges positive).
fn loglog(
    path: &Path,
    title: &str,
    xdesc: &str,
    ydesc: &str,
    series: &[Series],
    xfmt: &dyn Fn(&f64) -> String,
) -> Result<()> {
    load_font()?;
    let all: Vec<(f64, f64)> =
        series.iter().flat_map(|(_, v)| v.iter().copied()).filter(|p| p.0 > 0.0 && p.1 > 0.0).collect();
    if all.is_empty() {
        return Err(plot_err(format!("{title}: no data")));
    }
    let (xlo, xhi) = all.iter().fold((f64::INFINITY, 0f64), |(a, b), p| (a.min(p.0), b.max(p.0)));
    let (ylo, yhi) = all.iter().fold((f64::INFINITY, 0f64), |(a, b), p| (a.min(p.1), b.max(p.1)));
    let root = canvas(path)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 28))
        .margin(20)
        .x_label_area_size(55)
        .y_label_area_size(80)
        .build_cartesian_2d((xlo / 1.5..xhi * 1.5).log_scale(), (ylo / 2.0..yhi * 2.0).log_scale())
        .map_err(plot_err)?;
    chart
        .configure_mesh()
        .x_desc(xdesc)
        .y_desc(ydesc)
        .axis_desc_style(("sans-serif", 20))
        .label_style(("sans-serif", 16))
        .x_label_formatter(xfmt)
        .y_label_formatter(&|v| format!("{v:.0}"))
        .draw()
        .map_err(plot_err)?;
    for (i, (name, pts)) in series.iter().enumerate() {
        let c = color(i);
        let pts: Vec<(f64, f64)> = pts.iter().copied().filter(|p| p.0 > 0.0 && p.1 > 0.0).collect();
        chart
            .draw_series(LineSeries::new(pts.clone(), c.stroke_width(2)))
            .map_err(plot_err)?
            .label(name.as_str())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(3)));
        chart.draw_series(pts.into_iter().map(|p| Circle::new(p, 5, c.filled()))).map_err(plot_err)?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .label_font(("sans-serif", 16))
        .draw()
        .map_err(plot_err)?;
    root.present().map_err(plot_err)
}

/// `1 KB`, `10 MB`: decimal sizes for log-axis ticks.
fn si_bytes(v: &f64) -> String {
    let v = *v;
    match v {
        v if v >= 1e6 => format!("{:.0} MB", v / 1e6),
        v if v >= 1e3 => format!("{:.0} KB", v / 1e3),
        v => format!("{v:.0} B"),
    }
}

/// Throughput (MB/s) against transfer size (bytes).
pub fn throughput(path: &Path, series: &[Series]) -> Result<()> {
    loglog(
        path,
        "Throughput against transfer size",
        "transfer size (bytes, log scale)",
        "MB/s (log scale)",
        series,
        &si_bytes,
    )
}

/// Exchanges per second against the number of client processes (linear axes from 0).
pub fn saturation(path: &Path, series: &[Series]) -> Result<()> {
    load_font()?;
    let all: Vec<(f64, f64)> = series.iter().flat_map(|(_, v)| v.iter().copied()).collect();
    if all.is_empty() {
        return Err(plot_err("saturation: no data"));
    }
    let xmax = all.iter().map(|p| p.0).fold(1.0, f64::max);
    let ymax = all.iter().map(|p| p.1).fold(1.0, f64::max);
    let root = canvas(path)?;
    let mut chart = ChartBuilder::on(&root)
        .caption("Server throughput against client processes", ("sans-serif", 28))
        .margin(20)
        .x_label_area_size(55)
        .y_label_area_size(90)
        .build_cartesian_2d(0f64..xmax + 1.0, 0f64..ymax * 1.2)
        .map_err(plot_err)?;
    chart
        .configure_mesh()
        .x_desc("client processes")
        .y_desc("exchanges / s")
        .axis_desc_style(("sans-serif", 20))
        .label_style(("sans-serif", 16))
        .x_label_formatter(&|v| format!("{v:.0}"))
        .y_label_formatter(&|v| format!("{v:.0}"))
        .draw()
        .map_err(plot_err)?;
    for (i, (name, pts)) in series.iter().enumerate() {
        let c = color(i);
        chart
            .draw_series(LineSeries::new(pts.clone(), c.stroke_width(2)))
            .map_err(plot_err)?
            .label(name.as_str())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(3)));
        chart.draw_series(pts.iter().map(|p| Circle::new(*p, 5, c.filled()))).map_err(plot_err)?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .label_font(("sans-serif", 16))
        .draw()
        .map_err(plot_err)?;
    root.present().map_err(plot_err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cdf_points_end_at_one() {
        let v: Vec<f64> = (1..=1000).map(f64::from).collect();
        let p = cdf_points(&v, 100);
        assert!(p.len() <= 102);
        assert_eq!(p.last(), Some(&(1000.0, 1.0)));
        assert_eq!(p[0], (1.0, 0.001));
        assert!(cdf_points(&[], 10).is_empty());
    }

    #[test]
    fn the_latency_plots_series_have_colours_of_their_own() {
        let colours: std::collections::HashSet<(u8, u8, u8)> =
            (0..16).map(color).map(|RGBColor(r, g, b)| (r, g, b)).collect();
        assert_eq!(colours.len(), 16);
    }
}
