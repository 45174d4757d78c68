//! The fixed payloads the conformance suite looks for: media, texts and URIs.
//!
//! The suite compares some of these byte for byte (the audio MIME type, the embedded resource's
//! URI), others only for presence; all of them are the values its reference server returns.

/// A 1×1 PNG, base64.
pub const PNG_BASE64: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==";

/// A WAV file with two bytes of silence, base64.
pub const WAV_BASE64: &str = "UklGRiYAAABXQVZFZm10IBAAAAABAAEAQB8AAAB9AAACABAAZGF0YQIAAAA=";

/// The text resource `resources-read-text` reads.
pub const STATIC_TEXT_URI: &str = "test://static-text";
/// The binary resource `resources-read-binary` reads.
pub const STATIC_BINARY_URI: &str = "test://static-binary";
/// The resource `resources-subscribe` and `resources-unsubscribe` watch.
pub const WATCHED_URI: &str = "test://watched-resource";
/// The template `resources-templates-read` expands (`test://template/123/data`).
pub const TEMPLATE_URI: &str = "test://template/{id}/data";
