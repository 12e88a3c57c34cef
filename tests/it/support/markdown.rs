//! The fenced code blocks of a Markdown file, with the `<!-- docs-check: ... -->` markers
//! written on the lines just before them: what tests/docs.rs checks and tests/new_user.rs
//! runs. A small reader of CommonMark's fences (backticks or tildes, three or more, at
//! any indentation, as inside list items), not a Markdown parser: nothing else of the
//! document matters to those tests.

/// One fenced code block.
#[derive(Debug, Clone)]
pub struct Block {
    /// The 1-based line of the opening fence: content line `n` of the block (1-based) is
    /// line `line + n` of the file.
    pub line: usize,
    /// The info string's first word, lower-cased (`yaml`, `sh`, `text`, ...).
    pub lang: String,
    /// The lines between the fences, the opening fence's indentation taken off each.
    pub text: String,
    /// The markers on the lines directly above the opening fence, top to bottom, each the
    /// text between `<!-- docs-check:` and `-->`, trimmed.
    pub markers: Vec<String>,
    /// Whether a closing fence was found (an unclosed block runs to the end of the file).
    pub closed: bool,
}

/// What a Markdown file holds for the docs' tests.
#[derive(Debug, Default)]
pub struct Parsed {
    pub blocks: Vec<Block>,
    /// Marker lines that stand before no code block (a typo'd fence, a blank line in
    /// between): `(line, marker)`. A marker that marks nothing would silently check nothing.
    pub stray_markers: Vec<(usize, String)>,
}

const MARKER_OPEN: &str = "<!-- docs-check:";
const MARKER_CLOSE: &str = "-->";

/// The marker's words, if `line` is a marker line.
fn marker(line: &str) -> Option<String> {
    let t = line.trim();
    t.strip_prefix(MARKER_OPEN)?
        .strip_suffix(MARKER_CLOSE)
        .map(|m| m.trim().to_owned())
}

/// An opening fence: its character, length and info string.
fn opening_fence(line: &str) -> Option<(char, usize, String)> {
    let t = line.trim_start();
    let c = t.chars().next().filter(|c| *c == '`' || *c == '~')?;
    let n = t.chars().take_while(|x| *x == c).count();
    if n < 3 {
        return None;
    }
    let info = t[n..].trim();
    // A backtick fence's info string has no backtick (CommonMark): that is inline code.
    if c == '`' && info.contains('`') {
        return None;
    }
    Some((c, n, info.to_owned()))
}

fn closes(line: &str, c: char, n: usize) -> bool {
    let t = line.trim();
    t.len() >= n && t.chars().all(|x| x == c)
}

pub fn parse(markdown: &str) -> Parsed {
    let lines: Vec<&str> = markdown.lines().collect();
    let mut parsed = Parsed::default();
    let mut pending: Vec<(usize, String)> = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        if let Some(m) = marker(line) {
            pending.push((i + 1, m));
            i += 1;
            continue;
        }
        let Some((c, n, info)) = opening_fence(line) else {
            parsed.stray_markers.append(&mut pending);
            i += 1;
            continue;
        };
        let indent = line.len() - line.trim_start().len();
        let mut text = String::new();
        let mut closed = false;
        let mut j = i + 1;
        while j < lines.len() {
            if closes(lines[j], c, n) {
                closed = true;
                break;
            }
            let content = lines[j];
            // Take off at most the fence's indentation, as CommonMark does.
            let strip = content.chars().take(indent).take_while(|x| *x == ' ').count();
            text.push_str(&content[strip..]);
            text.push('\n');
            j += 1;
        }
        parsed.blocks.push(Block {
            line: i + 1,
            lang: info
                .split_whitespace()
                .next()
                .unwrap_or_default()
                .to_ascii_lowercase(),
            text,
            markers: pending.drain(..).map(|(_, m)| m).collect(),
            closed,
        });
        i = j + 1;
    }
    parsed.stray_markers.append(&mut pending);
    parsed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fences_markers_and_indentation() {
        let md = "# Title\n\n<!-- docs-check: invalid -->\n```yaml\na: 1\n```\n\n- item:\n\n   ```sh\n   echo hi\n    two\n   ```\n\n<!-- docs-check: other yaml -->\n\nnot a block\n````markdown\n```yaml\nx: 1\n```\n````\n";
        let p = parse(md);
        assert_eq!(p.blocks.len(), 3, "{p:?}");
        assert_eq!(
            (
                p.blocks[0].line,
                p.blocks[0].lang.as_str(),
                p.blocks[0].text.as_str()
            ),
            (4, "yaml", "a: 1\n")
        );
        assert_eq!(p.blocks[0].markers, ["invalid"]);
        assert_eq!(p.blocks[1].text, "echo hi\n two\n");
        // The inner fence is content of the four-backtick block, not a block of its own.
        assert_eq!(p.blocks[2].lang, "markdown");
        assert_eq!(p.blocks[2].text, "```yaml\nx: 1\n```\n");
        assert_eq!(p.stray_markers, [(15, "other yaml".to_owned())]);
        assert!(p.blocks.iter().all(|b| b.closed));
    }
}
