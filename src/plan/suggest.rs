//! "Did you mean `duration`?": the nearest of the names a place allows, for every diagnostic of
//! a name that is not there (a node, a property, a metric, a `--set` path, a phase).
//!
//! Not a spelling checker: it offers one name only when it is close enough to be the one meant
//! (a letter or two off, or two letters swapped), and nothing otherwise.

/// The candidate nearest to `name`, if one is near: at most one edit (an insertion, deletion,
/// change or swap of two neighbours) for names of up to four characters, two for longer ones;
/// the first of the nearest on a tie. Case is ignored.
pub fn nearest<'a>(name: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let name = name.to_ascii_lowercase();
    let reach = if name.chars().count() <= 4 { 1 } else { 2 };
    candidates
        .into_iter()
        .filter(|c| !c.is_empty())
        .map(|c| {
            (
                strsim::damerau_levenshtein(&name, &c.to_ascii_lowercase()),
                c,
            )
        })
        .filter(|&(distance, _)| distance <= reach)
        .min_by_key(|&(distance, _)| distance)
        .map(|(_, c)| c)
}

/// `"did you mean `X`? "`, or nothing: the start of a help line.
pub fn did_you_mean<'a>(name: &str, candidates: impl IntoIterator<Item = &'a str>) -> String {
    nearest(name, candidates)
        .map(|c| format!("did you mean `{c}`? "))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn near_names_are_offered_and_far_ones_are_not() {
        let phase = ["concurrency", "rate", "requests", "duration", "record"];
        assert_eq!(nearest("concurency", phase), Some("concurrency"));
        assert_eq!(nearest("duraton", phase), Some("duration"));
        assert_eq!(nearest("requets", phase), Some("requests"));
        assert_eq!(nearest("rat", phase), Some("rate"));
        assert_eq!(nearest("Rate", phase), Some("rate"));
        assert_eq!(nearest("modle", ["model", "api"]), Some("model"));
        assert_eq!(nearest("ttfb", ["ttft", "itl", "e2e"]), Some("ttft"));
        assert_eq!(nearest("latency", ["ttft", "itl", "e2e"]), None);
        assert_eq!(nearest("x", ["ttft", "itl"]), None);
        assert_eq!(did_you_mean("phse", ["phase"]), "did you mean `phase`? ");
        assert_eq!(did_you_mean("frob", ["phase"]), "");
    }
}
