//! `--plot`: one image with two panels — the median wall time of every query
//! under every policy (grouped bars), and the staged bytes over one scan of
//! the first query under every non-`off` policy.

use std::path::Path;

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::FontTransform;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::run::StagedSeries;

type Error = Box<dyn std::error::Error>;

/// The bars' values: `(query, [(policy, median wall ms)])`.
pub type Medians = [(String, Vec<(String, f64)>)];

fn color(policy: &str, index: usize) -> RGBColor {
    match policy {
        "off" => RGBColor(140, 140, 140),
        "batched" => RGBColor(31, 119, 180),
        "pipelined" => RGBColor(255, 127, 14),
        _ => {
            let c = Palette99::pick(index + 3).to_rgba();
            RGBColor(c.0, c.1, c.2)
        }
    }
}

/// Draw both panels into `path`: SVG, or PNG if it ends in `.png`.
pub fn draw(
    path: &Path,
    title: &str,
    medians: &Medians,
    staged: &[StagedSeries],
) -> Result<(), Error> {
    // Text is laid out and (for PNG) rasterised with a font embedded in the
    // binary, so no system font is needed.
    plotters::style::register_font("sans-serif", FontStyle::Normal, dejavu::sans::regular())
        .map_err(|_| "the embedded DejaVu Sans font did not load")?;
    let policies = medians.first().map(|(_, p)| p.len()).unwrap_or(1).max(1);
    let width = (160 + medians.len() * (policies * 10 + 8)).clamp(1000, 6000) as u32;
    let size = (width, 1000);
    let png = path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("png"));
    if png {
        let root = BitMapBackend::new(path, size).into_drawing_area();
        panels(&root, title, medians, staged)?;
        root.present()?;
    } else {
        let root = SVGBackend::new(path, size).into_drawing_area();
        panels(&root, title, medians, staged)?;
        root.present()?;
    }
    Ok(())
}

fn panels<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    title: &str,
    medians: &Medians,
    staged: &[StagedSeries],
) -> Result<(), Error>
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE)?;
    let root = root.titled(title, ("sans-serif", 22))?;
    let (top, bottom) = root.split_vertically((root.dim_in_pixel().1 as f64 * 0.58) as u32);
    bars(&top, medians)?;
    staged_bytes(&bottom, staged)?;
    Ok(())
}

fn bars<DB: DrawingBackend>(area: &DrawingArea<DB, Shift>, medians: &Medians) -> Result<(), Error>
where
    DB::ErrorType: 'static,
{
    let names: Vec<&str> = medians.iter().map(|(q, _)| q.as_str()).collect();
    let max = medians
        .iter()
        .flat_map(|(_, p)| p.iter().map(|(_, ms)| *ms))
        .filter(|ms| ms.is_finite())
        .fold(0.0, f64::max)
        .max(1.0);
    // Names side by side if they fit under their bars, else turned upright.
    let longest = names.iter().map(|n| n.len()).max().unwrap_or(2) as u32;
    let per_query = area.dim_in_pixel().0.saturating_sub(100) / names.len().max(1) as u32;
    let rotate = per_query < 8 * longest + 8;
    let label_area = if rotate { 16 + 8 * longest } else { 40 };
    // 100 units of x per query, its name under the middle of its bars
    // (integers: plotters formats their labels with our formatter).
    const UNIT: i32 = 100;
    let x = (0..names.len().max(1) as i32 * UNIT).with_key_points(
        (0..names.len() as i32)
            .map(|i| i * UNIT + UNIT / 2)
            .collect(),
    );
    let mut chart = ChartBuilder::on(area)
        .caption("median wall time per query", ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(label_area)
        .y_label_area_size(70)
        // Headroom for the legend.
        .build_cartesian_2d(x, 0.0..max * 1.25)?;
    let label_style = ("sans-serif", 13).into_text_style(area);
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(names.len())
        .x_label_style(label_style.clone())
        .x_label_formatter(&|x| match names.get((*x / UNIT) as usize) {
            // Upright names are drawn below, each starting under its tick.
            Some(name) if !rotate => name.to_string(),
            _ => String::new(),
        })
        .y_desc("ms")
        .draw()?;
    if rotate {
        let upright = label_style
            .transform(FontTransform::Rotate90)
            .pos(Pos::new(HPos::Left, VPos::Center));
        let (base_x, base_y) = area.get_base_pixel();
        for (i, name) in names.iter().enumerate() {
            let (x, y) = chart.backend_coord(&(i as i32 * UNIT + UNIT / 2, 0.0));
            area.draw_text(name, &upright, (x - base_x, y - base_y + 10))?;
        }
    }
    let policies: Vec<String> = medians
        .first()
        .map(|(_, p)| p.iter().map(|(name, _)| name.clone()).collect())
        .unwrap_or_default();
    // The bars of a query fill the middle 80% of its 100 units.
    let slot = 80 / policies.len().max(1) as i32;
    for (j, policy) in policies.iter().enumerate() {
        let color = color(policy, j);
        let left = 10 + j as i32 * slot;
        chart
            .draw_series(medians.iter().enumerate().filter_map(|(i, (_, per))| {
                let ms = per.get(j).map(|(_, ms)| *ms).filter(|ms| ms.is_finite())?;
                let x0 = i as i32 * UNIT + left;
                Some(Rectangle::new([(x0, 0.0), (x0 + slot, ms)], color.filled()))
            }))?
            .label(policy.clone())
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], color.filled()));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 14))
        .draw()?;
    Ok(())
}

fn staged_bytes<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    staged: &[StagedSeries],
) -> Result<(), Error>
where
    DB::ErrorType: 'static,
{
    let caption = match staged.first() {
        Some(s) if s.scans > 1 => format!(
            "staged bytes over one execution of {} (scan {} of {}, the one that staged most)",
            s.query,
            s.scan + 1,
            s.scans
        ),
        Some(s) => format!("staged bytes over one execution of {}", s.query),
        None => "staged bytes: no policy other than off was run".to_string(),
    };
    let mib = |b: u64| b as f64 / (1 << 20) as f64;
    let max_t = staged
        .iter()
        .flat_map(|s| s.points.iter().map(|(t, _)| *t))
        .fold(1.0, f64::max);
    let max_mib = staged
        .iter()
        .flat_map(|s| s.points.iter().map(|(_, b)| mib(*b)))
        .fold(0.0, f64::max)
        .max(0.01);
    let mut chart = ChartBuilder::on(area)
        .caption(caption, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(0.0..max_t, 0.0..max_mib * 1.1)?;
    chart
        .configure_mesh()
        .x_desc("ms since the execution started")
        .y_desc("staged MiB")
        .draw()?;
    for (j, series) in staged.iter().enumerate() {
        let color = color(&series.policy, j + 1);
        chart
            .draw_series(LineSeries::new(
                series.points.iter().map(|(t, b)| (*t, mib(*b))),
                color.stroke_width(2),
            ))?
            .label(series.policy.clone())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 16, y)], color.stroke_width(2))
            });
    }
    if !staged.is_empty() {
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .label_font(("sans-serif", 14))
            .draw()?;
    }
    Ok(())
}
