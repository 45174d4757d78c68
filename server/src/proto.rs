//! The service's `.proto` at run time, and the one place messages turn into the JSON the REST
//! routes read and back: gRPC (`crate::grpc`) and Connect's binary form
//! (`crate::api::connect`) both go through here. [`budget`]: what a message may hold before
//! it is decoded.

pub mod budget;

use std::sync::OnceLock;

use prost_reflect::{DescriptorPool, DynamicMessage, MessageDescriptor};
use serde_json::{Map, Value};
use tonic::Status;

use aperture_types::error::{AppError, ErrorCode};

/// The encoded `FileDescriptorSet` of the service's `.proto` (and what it imports).
pub const FILE_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/agent_tool_exposure.bin"));

/// The service's full name.
pub const SERVICE_NAME: &str = "agent_tool_exposure.v1.AgentToolExposureService";

/// The `.proto`'s descriptors.
pub fn descriptor_pool() -> &'static DescriptorPool {
    static POOL: OnceLock<DescriptorPool> = OnceLock::new();
    POOL.get_or_init(|| {
        // Compiled by build.rs from the same file: decoding it cannot fail but by a build bug.
        DescriptorPool::decode(FILE_DESCRIPTOR_SET)
            .unwrap_or_else(|e| panic!("the compiled .proto does not decode: {e}"))
    })
}

/// A request message as the JSON object the REST route reads: the contract's field names,
/// integers as numbers, fields left unset left out.
pub fn to_json(message: &DynamicMessage) -> Result<Map<String, Value>, Status> {
    let options = prost_reflect::SerializeOptions::new()
        .stringify_64_bit_integers(false)
        .skip_default_fields(true);
    let value = message
        .serialize_with_options(serde_json::value::Serializer, &options)
        .map_err(|e| Status::invalid_argument(format!("the request message: {e}")))?;
    match integral(value) {
        Value::Object(map) => Ok(map),
        _ => Err(Status::invalid_argument(
            "the request message is not a message",
        )),
    }
}

/// The descriptor of `method`'s request (`true`) or response (`false`) message.
pub fn message_of(method: &str, request: bool) -> Option<MessageDescriptor> {
    descriptor_pool()
        .get_service_by_name(SERVICE_NAME)?
        .methods()
        .find(|m| m.name() == method)
        .map(|m| if request { m.input() } else { m.output() })
}

/// A request message of `input`, decoded once its wire bytes are found within the value
/// budget: over it, `resource_exhausted` ([`ErrorCode::PayloadTooLarge`]); bytes that are not
/// such a message, `invalid_argument`.
pub fn decode_request(
    input: MessageDescriptor,
    bytes: bytes::Bytes,
) -> Result<DynamicMessage, AppError> {
    budget::check(&input, &bytes)?;
    DynamicMessage::decode(input, bytes).map_err(|e| {
        AppError::new(
            ErrorCode::BadRequest,
            format!("the request message does not decode: {e}"),
        )
    })
}

/// A binary (`application/proto`) Connect request of `method` as the JSON the REST route
/// reads.
pub fn proto_request_as_json(
    method: &str,
    bytes: bytes::Bytes,
) -> Result<Map<String, Value>, AppError> {
    let input = message_of(method, true).ok_or_else(|| AppError::not_found("method"))?;
    let message = decode_request(input, bytes)?;
    to_json(&message).map_err(|s| AppError::new(ErrorCode::BadRequest, s.message()))
}

/// A REST answer of `method` as its binary (`application/proto`) response message.
pub fn json_answer_as_proto(method: &str, json: &[u8]) -> Result<Vec<u8>, String> {
    let output = message_of(method, false).ok_or_else(|| format!("no method {method}"))?;
    let message = from_json(&output, json).map_err(|s| s.message().to_owned())?;
    Ok(prost::Message::encode_to_vec(&message))
}

/// JSON numbers as the REST routes read them: `google.protobuf.Struct` and `Value` carry every
/// number as a double, so a whole number (within ±2^53, where doubles are exact) becomes an
/// integer again — a policy's `max_duration_millis`, a tool's integer argument.
fn integral(value: Value) -> Value {
    const EXACT: f64 = 9_007_199_254_740_992.0;
    match value {
        Value::Number(n) if n.is_f64() => match n.as_f64() {
            Some(f) if f.fract() == 0.0 && f.abs() <= EXACT => {
                // Exact: a whole double within ±2^53 is an i64.
                #[allow(clippy::cast_possible_truncation)]
                Value::from(f as i64)
            }
            _ => Value::Number(n),
        },
        Value::Array(items) => Value::Array(items.into_iter().map(integral).collect()),
        Value::Object(map) => {
            Value::Object(map.into_iter().map(|(k, v)| (k, integral(v))).collect())
        }
        other => other,
    }
}

/// A Connect (JSON) request message as the REST routes read it: proto3's JSON writes 64-bit
/// integers as strings (`"limit": "5"`), the routes take numbers; per the method's request
/// message, such a field that holds a string of digits becomes that number.
pub fn integers_as_numbers(method: &str, message: &mut Map<String, Value>) {
    if let Some(input) = message_of(method, true) {
        numbers_in(&input, message);
    }
}

fn numbers_in(descriptor: &MessageDescriptor, message: &mut Map<String, Value>) {
    use prost_reflect::Kind;
    for field in descriptor.fields() {
        let Some(value) = message.get_mut(field.json_name()) else {
            continue;
        };
        match field.kind() {
            Kind::Int64 | Kind::Sint64 | Kind::Sfixed64 => {
                if let Some(n) = value.as_str().and_then(|s| s.parse::<i64>().ok()) {
                    *value = Value::from(n);
                }
            }
            Kind::Uint64 | Kind::Fixed64 => {
                if let Some(n) = value.as_str().and_then(|s| s.parse::<u64>().ok()) {
                    *value = Value::from(n);
                }
            }
            Kind::Message(nested) if !field.is_list() && !field.is_map() => {
                if nested.package_name() == "agent_tool_exposure.v1"
                    && let Value::Object(inner) = value
                {
                    numbers_in(&nested, inner);
                }
            }
            _ => {}
        }
    }
}

/// The REST answer as the method's response message. A field the `.proto` lacks is a bug of
/// the `.proto` (the test suite checks every answer against it): logged, and left out.
pub fn from_json(output: &MessageDescriptor, bytes: &[u8]) -> Result<DynamicMessage, Status> {
    let decode = |deny: bool| {
        let options = prost_reflect::DeserializeOptions::new().deny_unknown_fields(deny);
        let mut deserializer = serde_json::Deserializer::from_slice(bytes);
        DynamicMessage::deserialize_with_options(output.clone(), &mut deserializer, &options)
    };
    decode(true).or_else(|e| {
        tracing::warn!(error = %e, message = output.full_name(), "an answer has a field the .proto does not");
        decode(false).map_err(|e| Status::internal(format!("the answer does not fit the .proto: {e}")))
    })
}

/// Appends a length-delimited protobuf field.
pub fn proto_bytes(out: &mut Vec<u8>, field: u32, bytes: &[u8]) {
    proto_varint(out, u64::from(field << 3 | 2));
    proto_varint(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

/// Appends a base-128 varint.
pub fn proto_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8 & 0x7f) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_doubles_become_integers_and_64_bit_strings_numbers() {
        let value = serde_json::json!({"a": 300.0, "b": [1.5, 2.0], "c": {"d": -7.0}, "e": "8"});
        assert_eq!(
            integral(value),
            serde_json::json!({"a": 300, "b": [1.5, 2], "c": {"d": -7}, "e": "8"})
        );
        let mut message = serde_json::json!({"name": "t", "risk": ["read"], "price_cents": "25"});
        let map = message.as_object_mut().unwrap();
        integers_as_numbers("PutToolDescriptor", map);
        assert_eq!(map["price_cents"], 25);
        assert_eq!(map["name"], "t", "strings stay strings");
        let mut message = serde_json::json!({"limit": "5", "decision": "5"});
        let map = message.as_object_mut().unwrap();
        integers_as_numbers("ListReceipts", map);
        assert_eq!(map["limit"], 5);
        assert_eq!(map["decision"], "5");
    }
}
