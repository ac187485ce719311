//! How numbers read in the sentences llmload writes (reasons, diagnostics, notes): shared by
//! every stage that words a count, so that one count reads one way everywhere.
//!
//! Not for: numbers in tables and exports (the report's filters and formats own those).

/// 2995 → `2,995`.
pub(crate) fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::thousands;

    #[test]
    fn groups_digits_by_three() {
        for (n, text) in [
            (0, "0"),
            (999, "999"),
            (1000, "1,000"),
            (2995, "2,995"),
            (1234567, "1,234,567"),
        ] {
            assert_eq!(thousands(n), text);
        }
    }
}
