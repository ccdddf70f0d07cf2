//! SVG charts of a report: throughput by scenario and library, and the wait-time
//! distribution under contention.

use std::path::{Path, PathBuf};

use plotters::prelude::*;

use crate::report::{Report, Row};
use crate::scenario::BoxError;

/// One colour per library, the same in every chart.
fn colour(library: &str) -> RGBColor {
    match library {
        "fenced" | "fenced-script" => RGBColor(0x1b, 0x9e, 0x77),
        "fenced-tx" => RGBColor(0x66, 0xa6, 0x1e),
        "fenced-lock" => RGBColor(0x4d, 0xaf, 0x4a),
        "raw" => RGBColor(0x75, 0x70, 0xb3),
        "rslock" => RGBColor(0xd9, 0x5f, 0x02),
        "redlock" => RGBColor(0xe7, 0x29, 0x8a),
        _ => RGBColor(0x66, 0x66, 0x66),
    }
}

/// Writes `throughput.svg` and `contended-waits.svg` into `dir`; returns their paths.
pub fn write_charts(report: &Report, dir: &Path) -> Result<Vec<PathBuf>, BoxError> {
    std::fs::create_dir_all(dir)?;
    let mut written = vec![throughput(report, &dir.join("throughput.svg"))?];
    if report
        .scenarios
        .iter()
        .any(|r| r.wait_percentiles_us.is_some())
    {
        written.push(waits(report, &dir.join("contended-waits.svg"))?);
    }
    Ok(written)
}

fn throughput(report: &Report, path: &Path) -> Result<PathBuf, BoxError> {
    let rows: Vec<&Row> = report
        .scenarios
        .iter()
        .filter(|r| r.leases.is_none())
        .collect();
    let height = 90 + 24 * rows.len() as u32;
    let root = SVGBackend::new(path, (960, height)).into_drawing_area();
    root.fill(&WHITE)?;
    let top = rows.iter().map(|r| r.ops_per_sec).fold(10.0, f64::max) * 40.0;
    let n = rows.len() as f64;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "Throughput: operations per second (log scale; median of the runs)",
            ("sans-serif", 18),
        )
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(8)
        .build_cartesian_2d((1f64..top).log_scale(), 0f64..n)?;
    chart
        .configure_mesh()
        .disable_y_mesh()
        .disable_y_axis()
        .x_desc("ops/s (waiters-1000: acquisitions/s while draining)")
        .draw()?;
    for (i, r) in rows.iter().enumerate() {
        let y = n - i as f64;
        chart.draw_series(std::iter::once(Rectangle::new(
            [(1.0, y - 0.85), (r.ops_per_sec.max(1.0), y - 0.15)],
            colour(&r.library).filled(),
        )))?;
        chart.draw_series(std::iter::once(Text::new(
            format!("{} / {}: {:.0}", r.scenario, r.library, r.ops_per_sec),
            (r.ops_per_sec.max(1.0) * 1.15, y - 0.75),
            ("sans-serif", 13),
        )))?;
    }
    root.present()?;
    Ok(path.to_path_buf())
}

fn waits(report: &Report, path: &Path) -> Result<PathBuf, BoxError> {
    let rows: Vec<&Row> = report
        .scenarios
        .iter()
        .filter(|r| r.wait_percentiles_us.is_some())
        .collect();
    let root = SVGBackend::new(path, (960, 480)).into_drawing_area();
    root.fill(&WHITE)?;
    let max_ms = rows
        .iter()
        .flat_map(|r| r.wait_percentiles_us.iter().flatten())
        .map(|(_, us)| us / 1000.0)
        .fold(1.0, f64::max)
        * 2.0;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "contended-8: how long a worker waits for the lock (percentiles)",
            ("sans-serif", 18),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d((0.1f64..max_ms).log_scale(), 50f64..100f64)?;
    chart
        .configure_mesh()
        .x_desc("wait, ms (log scale)")
        .y_desc("percentile of waits")
        .draw()?;
    for r in rows {
        let points: Vec<(f64, f64)> = r
            .wait_percentiles_us
            .iter()
            .flatten()
            .map(|(p, us)| ((us / 1000.0).max(0.1), *p))
            .collect();
        let c = colour(&r.library);
        chart
            .draw_series(LineSeries::new(points.clone(), c.stroke_width(3)))?
            .label(r.library.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(3)));
        chart.draw_series(points.into_iter().map(|p| Circle::new(p, 4, c.filled())))?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(path.to_path_buf())
}
