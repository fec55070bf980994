//! Parsing of argument values shared by the tools.

/// Parses a size such as `64`, `4K`, `1M` or `1G` (binary multiples).
pub fn parse_size(text: &str) -> Result<usize, String> {
    let t = text.trim();
    let (digits, mult) = match t.char_indices().last() {
        Some((i, 'k' | 'K')) => (&t[..i], 1usize << 10),
        Some((i, 'm' | 'M')) => (&t[..i], 1 << 20),
        Some((i, 'g' | 'G')) => (&t[..i], 1 << 30),
        _ => (t, 1),
    };
    let n: usize = digits
        .parse()
        .map_err(|_| format!("{text:?} is not a size (examples: 64, 4K, 1M)"))?;
    n.checked_mul(mult)
        .ok_or_else(|| format!("{text:?} is too large"))
}

/// Parses a comma-separated list of sizes, e.g. `8,64,1K`; every size must
/// be at least `min`.
pub fn parse_sizes(text: &str, min: usize) -> Result<Vec<usize>, String> {
    let sizes = text
        .split(',')
        .map(parse_size)
        .collect::<Result<Vec<_>, _>>()?;
    if sizes.is_empty() {
        return Err("no sizes given".into());
    }
    if let Some(s) = sizes.iter().find(|s| **s < min) {
        return Err(format!("size {s} is below the minimum of {min} bytes"));
    }
    Ok(sizes)
}

/// A comma-separated list of message sizes, each at least one byte, as a
/// command-line value (`--sizes 8,64,1K`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SizeList(pub Vec<usize>);

impl std::str::FromStr for SizeList {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        parse_sizes(s, 1).map(SizeList)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_accept_binary_suffixes_and_explain_errors() {
        assert_eq!(
            parse_sizes("8,64,1K,2m", 1).unwrap(),
            vec![8, 64, 1024, 2 << 20]
        );
        assert!(parse_sizes("8,x", 1)
            .unwrap_err()
            .contains("\"x\" is not a size"));
        assert!(parse_sizes("0,8", 1)
            .unwrap_err()
            .contains("below the minimum"));
        assert!(parse_size("99999999999999999999G").is_err());
    }
}
