//! `cost`: what the deployment under test costs an hour, which prices its tokens
//! (`cost { gpu-hour "$2.49" gpus=8 }`, or `cost { instance-hour "$98.32" }`).

use kdl::KdlNode;

use super::cx::{children, Cx, Handler};
use super::values::{Count, Dollars};
use crate::records::CostRate;

const USAGE: &str = "cost { gpu-hour \"$2.49\" gpus=8 } (or cost { instance-hour \"$98.32\" })";

/// What the block's one line says, once read.
type Price = Option<CostRate>;

const CHILDREN: &[(&str, Handler<Price>)] = &[
    ("gpu-hour", |cx, node, price| {
        let usage = "gpu-hour \"$2.49\" gpus=8";
        cx.no_children(node);
        cx.check_entries(node, 1, &["gpus"], usage);
        let dollars = cx.arg(node, usage, Dollars);
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
            *price = Some(crate::plan::gpu_hour_price(dollars, gpus));
        }
    }),
    ("instance-hour", |cx, node, price| {
        if let Some(dollars) = cx.single(node, "instance-hour \"$98.32\"", Dollars) {
            *price = Some(CostRate {
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

/// The `cost` node: exactly one price.
pub(super) fn cost(cx: &mut Cx, node: &KdlNode) -> Price {
    cx.no_args(node, USAGE);
    let lines = children(node).len();
    if lines != 1 {
        cx.error(
            node.name().span(),
            if lines == 0 {
                "`cost` gives no price".to_string()
            } else {
                "`cost` gives more than one price".to_string()
            },
            "one price",
            format!("give one: {USAGE}"),
        );
        return None;
    }
    let mut price = None;
    cx.walk(node, "in `cost`", CHILDREN, &mut price);
    price
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
        ] {
            let error = format!("{:?}", parse_plan("p.kdl", plan(text)).unwrap_err());
            assert!(error.contains(expected), "{text}: {error}");
        }
    }
}
