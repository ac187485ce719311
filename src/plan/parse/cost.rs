//! `cost`: what the deployment under test costs an hour, which prices its tokens
//! (`cost { gpu-hour "$2.49" gpus=8 }`, or `cost { instance-hour "$98.32" }`).

use kdl::KdlNode;

use super::cx::{children, property, Cx, Handler};
use super::values::{Count, Dollars, Text};
use crate::records::{CostRate, GpuTypePrice};

const USAGE: &str = "cost { gpu-hour \"$2.49\" gpus=8 } (or cost { instance-hour \"$98.32\" }, or a gpu-hour line per GPU type: gpu-hour \"$2.49\" gpu=\"H100\")";

/// What the block says: one price for the deployment, or a price per GPU type.
#[derive(Default)]
struct Prices {
    whole: Option<CostRate>,
    by_type: Vec<GpuTypePrice>,
}

const CHILDREN: &[(&str, Handler<Prices>)] = &[
    ("gpu-hour", |cx, node, prices| {
        let usage = "gpu-hour \"$2.49\" gpus=8 (or gpu-hour \"$2.49\" gpu=\"H100\": that type's price, its count the telemetry's)";
        cx.no_children(node);
        cx.check_entries(node, 1, &["gpus", "gpu"], usage);
        let dollars = cx.arg(node, usage, Dollars);
        let gpu_type = cx.prop(node, "gpu", usage, Text).ok().flatten();
        if let Some(model) = gpu_type {
            if property(node, "gpus").is_some() {
                cx.error(
                    node.name().span(),
                    "a GPU type's price takes its count from the telemetry, not gpus=",
                    "gpus= with gpu=",
                    "leave out gpus=: the run is priced by the GPUs its telemetry describes",
                );
                return;
            }
            let model = model.trim().to_string();
            let taken = prices
                .by_type
                .iter()
                .any(|p| p.model.eq_ignore_ascii_case(&model));
            if model.is_empty() || taken {
                cx.error(
                    node.name().span(),
                    format!("GPU type \"{model}\" is empty or priced twice"),
                    "GPU type",
                    "price each GPU type once, by a part of its model's name: gpu=\"H100\"",
                );
                return;
            }
            if let Some(dollars) = dollars {
                prices.by_type.push(GpuTypePrice {
                    model,
                    dollars_per_hour: dollars,
                });
            }
            return;
        }
        let gpus = cx.prop_or(
            node,
            "gpus",
            1,
            usage,
            Count {
                min: 1,
                max: 100_000,
            },
        );
        if let (Some(dollars), Some(gpus)) = (dollars, gpus) {
            prices.whole = Some(crate::plan::gpu_hour_price(dollars, gpus));
        }
    }),
    ("instance-hour", |cx, node, prices| {
        if let Some(dollars) = cx.single(node, "instance-hour \"$98.32\"", Dollars) {
            prices.whole = Some(CostRate {
                dollars_per_hour: dollars,
                basis: format!(
                    "{} an instance-hour",
                    crate::plan::units::format_price(dollars)
                ),
                per_gpu_hour: None,
            });
        }
    }),
];

/// The `cost` block: one price for the whole deployment, or (`gpu=` on each line) a price per
/// GPU type, the run then priced by the GPUs its telemetry describes.
pub(super) fn cost(cx: &mut Cx, node: &KdlNode) -> (Option<CostRate>, Vec<GpuTypePrice>) {
    cx.no_args(node, USAGE);
    let lines = children(node);
    let typed = |line: &KdlNode| property(line, "gpu").is_some();
    let all_typed = !lines.is_empty() && lines.iter().all(typed);
    if lines.is_empty() || (lines.len() > 1 && !all_typed) {
        cx.error(
            node.name().span(),
            if lines.is_empty() {
                "`cost` gives no price".to_string()
            } else {
                "`cost` gives more than one price".to_string()
            },
            "one price",
            format!("give one, or one per GPU type: {USAGE}"),
        );
        return (None, Vec::new());
    }
    let mut prices = Prices::default();
    cx.walk(node, "in `cost`", CHILDREN, &mut prices);
    (prices.whole, prices.by_type)
}

#[cfg(test)]
mod tests {
    use crate::plan::parse_plan;

    fn plan(cost: &str) -> String {
        format!(
            "target \"sim\"\nworkload {{ input 8; output 8 }}\nphase \"p\" {{ rate 1; duration \"1s\" }}\n{cost}\n"
        )
    }

    #[test]
    fn a_gpu_hour_or_an_instance_hour() {
        let gpus = parse_plan("p.kdl", plan("cost { gpu-hour \"$2.49\" gpus=8 }")).unwrap();
        let rate = gpus.cost.unwrap();
        assert!((rate.dollars_per_hour - 19.92).abs() < 1e-9);
        assert_eq!(rate.basis, "8 GPUs at $2.49 a GPU-hour");
        let one = parse_plan("p.kdl", plan("cost { instance-hour \"$98.32\" }")).unwrap();
        assert_eq!(one.cost.unwrap().dollars_per_hour, 98.32);
        assert!(parse_plan("p.kdl", plan("")).unwrap().cost.is_none());
        // A price per GPU type: the run priced by the GPUs its telemetry describes.
        let typed = parse_plan(
            "p.kdl",
            plan("cost { gpu-hour \"$2.49\" gpu=\"H100\"; gpu-hour \"$0.80\" gpu=\"L4\" }"),
        )
        .unwrap();
        assert_eq!(typed.cost, None);
        let types: Vec<(&str, f64)> = typed
            .gpu_prices
            .iter()
            .map(|p| (p.model.as_str(), p.dollars_per_hour))
            .collect();
        assert_eq!(types, [("H100", 2.49), ("L4", 0.80)]);
    }

    #[test]
    fn every_mistake_is_said() {
        for (text, expected) in [
            ("cost { gpu-hour 2.49 }", "expected a price"),
            ("cost { gpu-hour \"2.49\" }", "is not a price"),
            ("cost { gpu-hour \"$0\" }", "more than $0"),
            ("cost { gpu-hour \"$2\" gpus=0 }", "out of range"),
            ("cost { }", "gives no price"),
            (
                "cost { gpu-hour \"$2\"; instance-hour \"$9\" }",
                "more than one price",
            ),
            ("cost { spot-hour \"$2\" }", "unknown"),
            (
                "cost { gpu-hour \"$2\" gpu=\"H100\"; gpu-hour \"$1\" }",
                "more than one price",
            ),
            (
                "cost { gpu-hour \"$2\" gpu=\"H100\" gpus=8 }",
                "takes its count from the telemetry",
            ),
            (
                "cost { gpu-hour \"$2\" gpu=\"H100\"; gpu-hour \"$3\" gpu=\"h100\" }",
                "priced twice",
            ),
        ] {
            let error = format!("{:?}", parse_plan("p.kdl", plan(text)).unwrap_err());
            assert!(error.contains(expected), "{text}: {error}");
        }
    }
}
