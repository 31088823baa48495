//! A small line diff for divergence reports: expected against actual, pretty-printed JSON of a
//! few dozen lines at most in practice.

use std::fmt::Write;

/// Unchanged lines shown around each change; longer unchanged runs are elided.
const CONTEXT: usize = 3;

/// Above this many cells the LCS table is not built and the two sides are shown whole.
const MAX_CELLS: usize = 4_000_000;

/// A unified-style diff of `expected` against `actual`: ` ` unchanged, `-` only expected,
/// `+` only actual. Long unchanged runs are elided, keeping three lines around each change.
pub fn line_diff(expected: &str, actual: &str) -> String {
    let old: Vec<&str> = expected.lines().collect();
    let new: Vec<&str> = actual.lines().collect();
    let ops = diff_ops(&old, &new);
    render(&ops)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op<'a> {
    Same(&'a str),
    Removed(&'a str),
    Added(&'a str),
}

fn diff_ops<'a>(old: &[&'a str], new: &[&'a str]) -> Vec<Op<'a>> {
    // Common prefix and suffix first: a changed field in a large effect leaves a tiny core.
    let prefix = old.iter().zip(new).take_while(|(a, b)| a == b).count();
    let suffix = old[prefix..]
        .iter()
        .rev()
        .zip(new[prefix..].iter().rev())
        .take_while(|(a, b)| a == b)
        .count();
    let (a, b) = (
        &old[prefix..old.len() - suffix],
        &new[prefix..new.len() - suffix],
    );
    let mut ops: Vec<Op<'a>> = old[..prefix].iter().map(|l| Op::Same(l)).collect();
    if a.len().saturating_mul(b.len()) > MAX_CELLS {
        ops.extend(a.iter().map(|l| Op::Removed(l)));
        ops.extend(b.iter().map(|l| Op::Added(l)));
    } else {
        ops.extend(lcs_ops(a, b));
    }
    ops.extend(old[old.len() - suffix..].iter().map(|l| Op::Same(l)));
    ops
}

/// The classic longest-common-subsequence table, walked from the start.
fn lcs_ops<'a>(a: &[&'a str], b: &[&'a str]) -> Vec<Op<'a>> {
    let width = b.len() + 1;
    // table[i * width + j] = LCS length of a[i..] and b[j..].
    let mut table = vec![0u32; (a.len() + 1) * width];
    for i in (0..a.len()).rev() {
        for j in (0..b.len()).rev() {
            table[i * width + j] = if a[i] == b[j] {
                table[(i + 1) * width + j + 1] + 1
            } else {
                table[(i + 1) * width + j].max(table[i * width + j + 1])
            };
        }
    }
    let (mut i, mut j) = (0, 0);
    let mut ops = Vec::with_capacity(a.len() + b.len());
    while i < a.len() && j < b.len() {
        if a[i] == b[j] {
            ops.push(Op::Same(a[i]));
            i += 1;
            j += 1;
        } else if table[(i + 1) * width + j] >= table[i * width + j + 1] {
            ops.push(Op::Removed(a[i]));
            i += 1;
        } else {
            ops.push(Op::Added(b[j]));
            j += 1;
        }
    }
    ops.extend(a[i..].iter().map(|l| Op::Removed(l)));
    ops.extend(b[j..].iter().map(|l| Op::Added(l)));
    ops
}

fn render(ops: &[Op<'_>]) -> String {
    let changed: Vec<usize> = ops
        .iter()
        .enumerate()
        .filter(|(_, op)| !matches!(op, Op::Same(_)))
        .map(|(i, _)| i)
        .collect();
    let near_change = |i: usize| {
        // `changed` is sorted: find the nearest change on either side.
        let at = changed.partition_point(|&c| c < i);
        let after = changed.get(at).is_some_and(|&c| c - i <= CONTEXT);
        let before = at > 0 && i - changed[at - 1] <= CONTEXT;
        after || before
    };
    let mut out = String::new();
    let mut elided = 0usize;
    for (i, op) in ops.iter().enumerate() {
        let line = match op {
            Op::Same(line) if !near_change(i) => {
                elided += 1;
                continue;
            }
            Op::Same(line) => format!("  {line}"),
            Op::Removed(line) => format!("- {line}"),
            Op::Added(line) => format!("+ {line}"),
        };
        if elided > 0 {
            let _ = writeln!(out, "  … {elided} unchanged line(s)");
            elided = 0;
        }
        out.push_str(&line);
        out.push('\n');
    }
    if elided > 0 {
        let _ = writeln!(out, "  … {elided} unchanged line(s)");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_changed_line_shows_as_removed_then_added() {
        let diff = line_diff(
            "{\n  \"a\": 1,\n  \"b\": 2\n}",
            "{\n  \"a\": 1,\n  \"b\": 3\n}",
        );
        assert_eq!(
            diff,
            "  {\n    \"a\": 1,\n-   \"b\": 2\n+   \"b\": 3\n  }\n"
        );
    }

    #[test]
    fn insertions_and_deletions_align_on_common_lines() {
        let diff = line_diff("a\nb\nc\nd", "a\nc\nd\ne");
        assert_eq!(diff, "  a\n- b\n  c\n  d\n+ e\n");
    }

    #[test]
    fn long_unchanged_runs_are_elided() {
        let old: String = (0..20).map(|i| format!("line {i}\n")).collect();
        let new = old.replace("line 10\n", "line ten\n");
        let diff = line_diff(&old, &new);
        assert!(
            diff.starts_with("  … 7 unchanged line(s)\n  line 7\n"),
            "{diff}"
        );
        assert!(diff.contains("- line 10\n+ line ten\n"), "{diff}");
        assert!(
            diff.ends_with("  line 13\n  … 6 unchanged line(s)\n"),
            "{diff}"
        );
    }

    #[test]
    fn one_side_empty() {
        assert_eq!(line_diff("", "x\ny"), "+ x\n+ y\n");
        assert_eq!(line_diff("x", ""), "- x\n");
        assert_eq!(line_diff("", ""), "");
    }
}
