//! The fixture resources: two static ones (text and binary), a watched one, and a template.
//!
//! A URI that names none of them is not found: `-32002` on the 2025 wire, `-32602` at
//! 2026-07-28 (SEP-2164, rmcp maps the code), both with the URI in `data.uri`.

use rmcp::model::{
    CacheScope, ErrorData, ListResourceTemplatesResult, ListResourcesResult, ReadResourceResult,
    Resource, ResourceContents, ResourceTemplate,
};
use serde_json::json;

use crate::fixtures::{PNG_BASE64, STATIC_BINARY_URI, STATIC_TEXT_URI, TEMPLATE_URI, WATCHED_URI};
use crate::wire::Wire;

/// The watched resource's content.
const WATCHED_TEXT: &str = "Watched resource content";

/// `resources/list`: the first one listed is the one the suite's `caching` scenario reads.
pub fn list(wire: Wire) -> ListResourcesResult {
    let resources = vec![
        Resource::new(STATIC_TEXT_URI, "static-text")
            .with_title("Static Text Resource")
            .with_description("A static text resource for testing")
            .with_mime_type("text/plain"),
        Resource::new(STATIC_BINARY_URI, "static-binary")
            .with_title("Static Binary Resource")
            .with_description("A static binary resource (a PNG image) for testing")
            .with_mime_type("image/png"),
        Resource::new(WATCHED_URI, "watched-resource")
            .with_title("Watched Resource")
            .with_description("A resource clients may subscribe to")
            .with_mime_type("text/plain"),
    ];
    wire.cacheable(
        ListResourcesResult::with_all_items(resources),
        CacheScope::Public,
    )
}

/// `resources/templates/list`.
pub fn templates(wire: Wire) -> ListResourceTemplatesResult {
    let template = ResourceTemplate::new(TEMPLATE_URI, "template")
        .with_title("Resource Template")
        .with_description("A resource template with parameter substitution")
        .with_mime_type("application/json");
    wire.cacheable(
        ListResourceTemplatesResult::with_all_items(vec![template]),
        CacheScope::Public,
    )
}

/// `resources/read`.
pub fn read(wire: Wire, uri: &str) -> Result<ReadResourceResult, ErrorData> {
    let contents = contents(uri).ok_or_else(|| not_found(uri))?;
    Ok(wire.cacheable(ReadResourceResult::new(vec![contents]), CacheScope::Public))
}

/// Whether `uri` names a resource (for `resources/subscribe`).
pub fn exists(uri: &str) -> bool {
    contents(uri).is_some()
}

/// The error for a URI that names no resource.
pub fn not_found(uri: &str) -> ErrorData {
    ErrorData::resource_not_found(
        format!("Resource not found: {uri}"),
        Some(json!({ "uri": uri })),
    )
}

fn contents(uri: &str) -> Option<ResourceContents> {
    let text =
        |text: &str, mime_type: &str| ResourceContents::text(text, uri).with_mime_type(mime_type);
    match uri {
        STATIC_TEXT_URI => Some(text(
            "This is the content of the static text resource.",
            "text/plain",
        )),
        STATIC_BINARY_URI => {
            Some(ResourceContents::blob(PNG_BASE64, uri).with_mime_type("image/png"))
        }
        WATCHED_URI => Some(text(WATCHED_TEXT, "text/plain")),
        _ => {
            let id = template_id(uri)?;
            let data =
                json!({ "id": id, "templateTest": true, "data": format!("Data for ID: {id}") });
            Some(text(&data.to_string(), "application/json"))
        }
    }
}

/// The `{id}` of a URI of the template `test://template/{id}/data`.
fn template_id(uri: &str) -> Option<&str> {
    let id = uri
        .strip_prefix("test://template/")?
        .strip_suffix("/data")?;
    (!id.is_empty() && !id.contains('/')).then_some(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_template_matches_one_segment() {
        assert_eq!(template_id("test://template/123/data"), Some("123"));
        assert_eq!(template_id("test://template//data"), None);
        assert_eq!(template_id("test://template/1/2/data"), None);
        assert_eq!(template_id("test://template/123"), None);
    }

    #[test]
    fn an_unknown_uri_is_not_found_with_its_uri() {
        let uri = "test://nonexistent-resource-for-conformance-testing";
        let error = read(Wire::Stateless, uri).err();
        assert_eq!(
            error.and_then(|error| error.data),
            Some(json!({ "uri": uri }))
        );
    }
}
