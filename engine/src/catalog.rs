//! Catalog tools with their fingerprints: the two hashes every manifest needs of every tool,
//! computed once when the tool is written to the catalog rather than on every `tools/list`.

use serde::{Deserialize, Serialize};

use crate::canonical::advertised_schema_hash;
use crate::descriptor::ToolDescriptor;

/// The hashes of a tool's own definition.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fingerprints {
    /// [`ToolDescriptor::definition_hash`]: drift detection.
    pub definition_hash: String,
    /// The `schemaHash` of the tool advertised with its own input schema, which is what a
    /// manifest advertises whenever the policy does not narrow the tool.
    pub schema_hash: String,
}

impl Fingerprints {
    /// Computes the fingerprints of `tool`.
    pub fn of(tool: &ToolDescriptor) -> Self {
        Self {
            definition_hash: tool.definition_hash(),
            schema_hash: advertised_schema_hash(
                &tool.name,
                tool.title.as_deref(),
                tool.description.as_deref(),
                &tool.input_schema,
                tool.output_schema.as_ref(),
                tool.annotations.as_ref(),
            ),
        }
    }
}

/// A tool of the catalog and its fingerprints.
#[derive(Debug, Clone, PartialEq)]
pub struct CatalogTool {
    /// The tool.
    pub tool: ToolDescriptor,
    /// Its fingerprints.
    pub fingerprints: Fingerprints,
}

impl CatalogTool {
    /// `tool` with its fingerprints computed now.
    pub fn new(tool: ToolDescriptor) -> Self {
        let fingerprints = Fingerprints::of(&tool);
        Self { tool, fingerprints }
    }

    /// `tool` with fingerprints computed by [`Fingerprints::of`] when it was stored. The caller
    /// vouches that they belong to exactly this tool (the store writes both together).
    pub fn with_fingerprints(tool: ToolDescriptor, fingerprints: Fingerprints) -> Self {
        Self { tool, fingerprints }
    }
}

impl From<ToolDescriptor> for CatalogTool {
    fn from(tool: ToolDescriptor) -> Self {
        Self::new(tool)
    }
}
