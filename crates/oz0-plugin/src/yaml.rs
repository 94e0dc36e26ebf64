//! The one door a manifest's YAML comes in by: bounded before any value is
//! built.
//!
//! Threat: a manifest is untrusted text (a tool job carries one from
//! whoever submitted it), and YAML's anchors and aliases let a few bytes
//! name a value many times: `command: [*a, *a, …]` with `a` anchored on a
//! long string, or a tool list of aliases of a tool with such a command,
//! expands 50 KB into gigabytes while the value is built, long before a
//! count such as [`MAX_TOOLS`](crate::manifest::MAX_TOOLS) can be checked.
//! The parser's own alias limit bounds how often it jumps, not what each
//! jump copies.
//!
//! So [`from_str`] builds a value only after two walks that build nothing:
//!
//! 1. a pre-pass over the parser's events (`saphyr-parser`) that refuses any
//!    anchor or alias with its line (a manifest needs none), and bounds the
//!    number of values ([`MAX_YAML_NODES`]), their text
//!    ([`MAX_YAML_TEXT_BYTES`]) and their nesting ([`MAX_YAML_DEPTH`]);
//! 2. a census through the very parser that then builds the value
//!    (`serde_norway`), counting every value it visits, aliases expanded,
//!    against the same bounds: should the two parsers ever disagree on
//!    what is an alias, the value built is still bounded.
//!
//! The caller bounds the input's size first
//! ([`MAX_MANIFEST_BYTES`]).

use std::cell::Cell;
use std::fmt;

use saphyr_parser::{Event, Parser, ScanError, Span};
use serde::de::{self, DeserializeOwned, DeserializeSeed, Deserializer, Visitor};

use crate::manifest::{ManifestError, MAX_MANIFEST_BYTES};

/// Most values (scalars, lists and mappings) a manifest may hold. A
/// manifest at every other limit holds far fewer; this bounds what is built
/// when a manifest is refused for another reason only after building.
pub const MAX_YAML_NODES: usize = 65_536;
/// Most bytes of text its values may hold together: the input's limit, with
/// room for escapes (`\L` is two bytes of input and three of text).
pub const MAX_YAML_TEXT_BYTES: usize = 2 * MAX_MANIFEST_BYTES;
/// Deepest nesting of lists and mappings. A manifest uses four
/// (`tools:` → a tool → `container:` or `command:`).
pub const MAX_YAML_DEPTH: usize = 16;

/// Why YAML was refused before a value was built.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Refusal {
    /// An anchor (`&name`).
    #[error("an anchor (&name): a manifest takes no anchors or aliases, and needs none: write the value out in full where it is used")]
    Anchor,
    /// An alias (`*name`).
    #[error("an alias (*name): a manifest takes no anchors or aliases, and needs none: write the value out in full where it is used")]
    Alias,
    /// Over [`MAX_YAML_DEPTH`].
    #[error("lists and mappings nested over {MAX_YAML_DEPTH} deep: a manifest needs four (tools, a tool, its command or container)")]
    TooDeep,
    /// Over [`MAX_YAML_NODES`].
    #[error("over {MAX_YAML_NODES} values: split the plugin")]
    TooManyNodes,
    /// Over [`MAX_YAML_TEXT_BYTES`].
    #[error("over {MAX_YAML_TEXT_BYTES} bytes of text in its values: split the plugin")]
    TooMuchText,
}

/// What a walk has seen so far.
#[derive(Default)]
struct Budget {
    nodes: Cell<usize>,
    text: Cell<usize>,
    /// The bound a walk broke, kept for the caller: serde's errors carry
    /// only text.
    broken: Cell<Option<Refusal>>,
}

impl Budget {
    /// One more value, of `text` bytes, at nesting `depth` (1 for the
    /// document's own value).
    fn value(&self, text: usize, depth: usize) -> Result<(), Refusal> {
        self.nodes.set(self.nodes.get() + 1);
        self.text.set(self.text.get().saturating_add(text));
        let broken = if depth > MAX_YAML_DEPTH {
            Some(Refusal::TooDeep)
        } else if self.nodes.get() > MAX_YAML_NODES {
            Some(Refusal::TooManyNodes)
        } else if self.text.get() > MAX_YAML_TEXT_BYTES {
            Some(Refusal::TooMuchText)
        } else {
            None
        };
        match broken {
            Some(r) => {
                self.broken.set(Some(r));
                Err(r)
            }
            None => Ok(()),
        }
    }
}

/// Parses `text` into `T` once [`pre_pass`] and [`census`] hold.
pub fn from_str<T: DeserializeOwned>(text: &str) -> Result<T, ManifestError> {
    pre_pass(text)?;
    census(text)?;
    serde_norway::from_str(text).map_err(syntax)
}

fn syntax(e: serde_norway::Error) -> ManifestError {
    ManifestError::Syntax {
        location: e.location().map(|l| (l.line(), l.column())),
        message: e.to_string(),
    }
}

/// Walks the parser's events, building nothing: refuses the first anchor
/// or alias, and a value past a bound, with its line and column.
pub fn pre_pass(text: &str) -> Result<(), ManifestError> {
    check_events(Parser::new_from_str(text))
}

/// [`pre_pass`] over any event stream.
fn check_events<'i>(
    events: impl Iterator<Item = Result<(Event<'i>, Span), ScanError>>,
) -> Result<(), ManifestError> {
    let budget = Budget::default();
    let mut depth = 0usize;
    for event in events {
        let (event, span) = event.map_err(|e| ManifestError::Syntax {
            location: Some((e.marker().line(), e.marker().col() + 1)),
            message: e.info().to_string(),
        })?;
        let refused = |why| ManifestError::Refused {
            line: span.start.line(),
            column: span.start.col() + 1,
            why,
        };
        let (anchor, text, opens) = match event {
            Event::Alias(_) => return Err(refused(Refusal::Alias)),
            Event::Scalar(value, _, anchor, _) => (anchor, value.len(), false),
            Event::SequenceStart(anchor, _) | Event::MappingStart(anchor, _) => (anchor, 0, true),
            Event::SequenceEnd | Event::MappingEnd => {
                depth = depth.saturating_sub(1);
                continue;
            }
            Event::Nothing
            | Event::StreamStart
            | Event::StreamEnd
            | Event::DocumentStart(_)
            | Event::DocumentEnd => continue,
        };
        // The parser numbers anchors from 1; 0 is none.
        if anchor != 0 {
            return Err(refused(Refusal::Anchor));
        }
        budget.value(text, depth + 1).map_err(refused)?;
        if opens {
            depth += 1;
        }
    }
    Ok(())
}

/// Walks the value as `serde_norway` sees it, aliases expanded, building
/// nothing: refuses it at the value that breaks a bound.
pub fn census(text: &str) -> Result<(), ManifestError> {
    let budget = Budget::default();
    let walk = Walk {
        budget: &budget,
        depth: 1,
    };
    walk.deserialize(serde_norway::Deserializer::from_str(text))
        .map_err(|e| match budget.broken.get() {
            Some(why) => {
                let (line, column) = e.location().map_or((0, 0), |l| (l.line(), l.column()));
                ManifestError::Refused { line, column, why }
            }
            None => syntax(e),
        })
}

/// One value of a census, at nesting `depth`.
#[derive(Clone, Copy)]
struct Walk<'b> {
    budget: &'b Budget,
    depth: usize,
}

impl Walk<'_> {
    fn leaf<E: de::Error>(self, text: usize) -> Result<(), E> {
        self.budget
            .value(text, self.depth)
            .map_err(|r| E::custom(r.to_string()))
    }

    /// Counts a list or mapping; the walk of its members.
    fn open<E: de::Error>(self) -> Result<Self, E> {
        self.leaf(0)?;
        Ok(Walk {
            budget: self.budget,
            depth: self.depth + 1,
        })
    }
}

impl<'de> DeserializeSeed<'de> for Walk<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Walk<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any YAML value")
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<(), E> {
        self.leaf(0)
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<(), E> {
        self.leaf(0)
    }

    fn visit_i128<E: de::Error>(self, _: i128) -> Result<(), E> {
        self.leaf(0)
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<(), E> {
        self.leaf(0)
    }

    fn visit_u128<E: de::Error>(self, _: u128) -> Result<(), E> {
        self.leaf(0)
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<(), E> {
        self.leaf(0)
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<(), E> {
        self.leaf(v.len())
    }

    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        self.leaf(0)
    }

    fn visit_none<E: de::Error>(self) -> Result<(), E> {
        self.leaf(0)
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        self.deserialize(d)
    }

    fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let member = self.open()?;
        while seq.next_element_seed(member)?.is_some() {}
        Ok(())
    }

    fn visit_map<A: de::MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let member = self.open()?;
        while map.next_key_seed(member)?.is_some() {
            map.next_value_seed(member)?;
        }
        Ok(())
    }

    /// A tagged value (`!tag value`): the tag, then the value.
    fn visit_enum<A: de::EnumAccess<'de>>(self, data: A) -> Result<(), A::Error> {
        use de::VariantAccess;
        let member = self.open()?;
        let ((), value) = data.variant_seed(member)?;
        value.newtype_variant_seed(member)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use saphyr_parser::Marker;

    /// `n` aliases of a `len`-byte string, as a tool's command.
    fn bomb(len: usize, n: usize) -> String {
        format!(
            "description: &d {}\ntools:\n  - id: t\n    command: [{}]\n",
            "x".repeat(len),
            vec!["*d"; n].join(",")
        )
    }

    fn refusal(e: ManifestError) -> (usize, Refusal) {
        match e {
            ManifestError::Refused { line, why, .. } => (line, why),
            other => panic!("not refused by a bound: {other:?}"),
        }
    }

    #[test]
    fn anchors_are_refused_with_their_line() {
        let e = pre_pass("name: a\ntools:\n  - &t {id: t, command: [x]}\n").unwrap_err();
        assert_eq!(refusal(e.clone()), (3, Refusal::Anchor));
        let msg = e.to_string();
        assert!(msg.starts_with("oz0-plugin.yaml line 3 column "), "{msg}");
        assert!(msg.contains("takes no anchors or aliases"), "{msg}");
        for text in [
            "a: &x 1\n",
            "a: &x [1]\n",
            "a: &x {b: 1}\n",
            "a: &x\n",
            "a: &x !!str 1\n",
        ] {
            let e = pre_pass(text).unwrap_err();
            assert_eq!(refusal(e), (1, Refusal::Anchor), "{text:?}");
        }
    }

    #[test]
    fn aliases_are_refused_with_their_line() {
        // The anchor comes first in any text, and is refused; an alias of
        // an anchor never seen is the parser's error, with its line.
        let e = pre_pass("tools:\n  - id: t\n    command: [x, *a]\n").unwrap_err();
        assert!(
            matches!(&e, ManifestError::Syntax { location: Some((3, _)), message } if message.contains("unknown anchor")),
            "{e:?}"
        );
        // An alias event, wherever it comes from, is refused as such.
        let at = |line| Span::new(Marker::new(0, line, 4), Marker::new(0, line, 6));
        let events = [
            Event::StreamStart,
            Event::DocumentStart(false),
            Event::SequenceStart(0, None),
            Event::Alias(1),
        ];
        let e = check_events(
            events
                .into_iter()
                .enumerate()
                .map(|(i, e)| Ok((e, at(i + 1)))),
        )
        .unwrap_err();
        assert_eq!(refusal(e.clone()), (4, Refusal::Alias));
        assert!(e.to_string().contains("an alias (*name)"), "{e}");
        // A bomb is refused at its anchor, before a single copy is made.
        let e = pre_pass(&bomb(40_000, 40_000)).unwrap_err();
        assert_eq!(refusal(e), (1, Refusal::Anchor));
        // In quotes, `&` and `*` are text.
        pre_pass("tools:\n  - id: t\n    command: ['*a', \"&b\", c*d, e&f]\n").unwrap();
    }

    #[test]
    fn deep_nesting_is_refused() {
        let deep = |n: usize| format!("a: {}{}\n", "[".repeat(n), "]".repeat(n));
        // The document's mapping and n lists.
        pre_pass(&deep(MAX_YAML_DEPTH - 1)).unwrap();
        let e = pre_pass(&deep(MAX_YAML_DEPTH)).unwrap_err();
        assert_eq!(refusal(e), (1, Refusal::TooDeep));
        // Far deeper: refused by the bound or by the parser's own (its
        // scanner reads a flow's brackets ahead), never a stack overflow.
        let e = pre_pass(&deep(100_000)).unwrap_err();
        assert!(
            matches!(
                &e,
                ManifestError::Refused {
                    why: Refusal::TooDeep,
                    ..
                }
            ) || matches!(&e, ManifestError::Syntax { message, .. } if message.contains("recursion limit")),
            "{e:?}"
        );
        let block =
            (0..=MAX_YAML_DEPTH).fold(String::new(), |s, i| format!("{s}{}- \n", "  ".repeat(i)));
        let e = pre_pass(&block).unwrap_err();
        assert_eq!(refusal(e).1, Refusal::TooDeep);
    }

    #[test]
    fn too_many_values_are_refused() {
        let many = |n: usize| format!("a: [{}]\n", vec!["x"; n].join(","));
        // The document's mapping, its key and its list hold three.
        pre_pass(&many(MAX_YAML_NODES - 3)).unwrap();
        let e = pre_pass(&many(MAX_YAML_NODES - 2)).unwrap_err();
        assert_eq!(refusal(e), (1, Refusal::TooManyNodes));
    }

    #[test]
    fn the_census_bounds_what_aliases_expand_to() {
        // What the pre-pass refuses, the census bounds too, in case the
        // two parsers ever disagree on what is an alias. The location is
        // the aliased value's.
        let e = census(&bomb(40_000, 40_000)).unwrap_err();
        assert_eq!(refusal(e), (1, Refusal::TooMuchText));
        let e = census(&bomb(1, 70_000)).unwrap_err();
        assert_eq!(refusal(e), (1, Refusal::TooManyNodes));
        // Each list holds an alias of the one before: nested one deeper.
        let mut nested = String::from("b0: &b0 [x]\n");
        for i in 1..=MAX_YAML_DEPTH {
            nested.push_str(&format!("b{i}: &b{i} [*b{}]\n", i - 1));
        }
        let e = census(&nested).unwrap_err();
        assert_eq!(refusal(e).1, Refusal::TooDeep);
        // A few aliases of short values are within the bounds.
        census("a: &a [x]\nb: [*a, *a]\n").unwrap();
        // Not YAML: the parser's own error, with its location.
        let e = census("a: [unclosed\n").unwrap_err();
        assert!(
            matches!(
                e,
                ManifestError::Syntax {
                    location: Some(_),
                    ..
                }
            ),
            "{e:?}"
        );
    }

    #[test]
    fn manifests_without_anchors_are_parsed() {
        #[derive(serde::Deserialize, Debug, PartialEq)]
        struct Doc {
            tools: Vec<std::collections::BTreeMap<String, serde_norway::Value>>,
        }
        let text = "# a comment & a * star\n---\ntools:\n  - id: t\n    command: [python3, '/srv/s.py', \"--x=*\"]\n    container: {memory_mb: 256, cpus: 1.5}\n    egress: ['*.example:443']\n    isolation: !!str microvm\n  - {id: u, command: [a&b]}\n";
        let d: Doc = from_str(text).unwrap();
        assert_eq!(d.tools.len(), 2);
        assert_eq!(
            d.tools[0]["egress"],
            serde_norway::Value::Sequence(vec!["*.example:443".into()])
        );
        assert_eq!(d.tools[1]["command"][0], "a&b");
        let e = from_str::<Doc>(&bomb(10, 10)).unwrap_err();
        assert_eq!(refusal(e).1, Refusal::Anchor);
    }
}
