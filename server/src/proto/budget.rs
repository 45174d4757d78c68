//! The value budget of a request message (gRPC and Connect's `application/proto`).
//!
//! A message decodes into far more memory than it takes on the wire: a `google.protobuf.Value`
//! null is four bytes there, and hundreds once it is a [`prost_reflect::DynamicMessage`] and
//! then JSON. So before a message is decoded, its wire bytes are walked against the method's
//! request descriptor, counting values without allocating anything, and a message of more than
//! [`MAX_VALUES`] is refused. A value is one field occurrence on the wire (a message counts one
//! and its own fields count too, so the `Struct`/`Value`/`ListValue` nesting counts at every
//! level; a map entry counts one, its key and value too), or one element of a packed repeated
//! field. Bytes the walk cannot follow (a varint or a length past the end, an unknown wire
//! type, a group left open, nesting deeper than prost decodes) are malformed.

use aperture_types::error::{AppError, ErrorCode};
use prost::encoding::{WireType, decode_key, decode_varint};
use prost_reflect::{Kind, MessageDescriptor};

/// The most values one request message may carry.
pub const MAX_VALUES: usize = 50_000;

/// How deep messages and groups may nest: prost's own limit, which decoding enforces anyway;
/// the walk stops there too, so its recursion stays shallow whatever the bytes say.
const MAX_DEPTH: usize = 100;

/// Why a message was refused before it was decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// More than [`MAX_VALUES`] values: `resource_exhausted` (gRPC; Connect, HTTP 429).
    #[error("the request message carries more than {MAX_VALUES} values")]
    OverBudget,
    /// Not a protobuf message: `invalid_argument`.
    #[error("the request message does not decode: {0}")]
    Malformed(String),
}

impl From<Refusal> for AppError {
    fn from(refusal: Refusal) -> Self {
        let code = match refusal {
            Refusal::OverBudget => ErrorCode::PayloadTooLarge,
            Refusal::Malformed(_) => ErrorCode::BadRequest,
        };
        AppError::new(code, refusal.to_string())
    }
}

/// `Ok` when `bytes`, as a message of `descriptor`, carries at most [`MAX_VALUES`] values.
pub fn check(descriptor: &MessageDescriptor, bytes: &[u8]) -> Result<(), Refusal> {
    count(descriptor, bytes, MAX_VALUES).map(drop)
}

/// The values of `bytes` as a message of `descriptor`, or [`Refusal::OverBudget`] as soon as
/// they are more than `limit`.
fn count(descriptor: &MessageDescriptor, mut bytes: &[u8], limit: usize) -> Result<usize, Refusal> {
    let mut walk = Walk { values: 0, limit };
    walk.fields(Some(descriptor), &mut bytes, None, 0)?;
    Ok(walk.values)
}

struct Walk {
    values: usize,
    limit: usize,
}

fn malformed(e: prost::DecodeError) -> Refusal {
    Refusal::Malformed(e.to_string())
}

/// The next `len` bytes of `buf`.
fn take<'a>(buf: &mut &'a [u8], len: u64) -> Result<&'a [u8], Refusal> {
    let len = usize::try_from(len)
        .ok()
        .filter(|&l| l <= buf.len())
        .ok_or_else(|| Refusal::Malformed("a field runs past the end of its message".into()))?;
    let (taken, rest) = buf.split_at(len);
    *buf = rest;
    Ok(taken)
}

impl Walk {
    fn add(&mut self, values: usize) -> Result<(), Refusal> {
        self.values = self.values.saturating_add(values);
        if self.values > self.limit {
            return Err(Refusal::OverBudget);
        }
        Ok(())
    }

    /// The fields of one message of `descriptor` (`None`: a group no descriptor names, whose
    /// fields are all unknown) to the end of `buf`, or, for group `group`, to its end-group tag.
    fn fields(
        &mut self,
        descriptor: Option<&MessageDescriptor>,
        buf: &mut &[u8],
        group: Option<u32>,
        depth: usize,
    ) -> Result<(), Refusal> {
        while !buf.is_empty() {
            let (number, wire_type) = decode_key(buf).map_err(malformed)?;
            let field = descriptor.and_then(|d| d.get_field(number));
            match wire_type {
                WireType::Varint => {
                    decode_varint(buf).map_err(malformed)?;
                    self.add(1)?;
                }
                WireType::SixtyFourBit => {
                    take(buf, 8)?;
                    self.add(1)?;
                }
                WireType::ThirtyTwoBit => {
                    take(buf, 4)?;
                    self.add(1)?;
                }
                WireType::LengthDelimited => {
                    let len = decode_varint(buf).map_err(malformed)?;
                    let mut inner = take(buf, len)?;
                    let Some(field) = field else {
                        // Unknown: kept as bytes by the decoder.
                        self.add(1)?;
                        continue;
                    };
                    match field.kind() {
                        // Packed: numbers, booleans and enums, one after the other.
                        kind if field.is_list()
                            && kind.wire_type() != WireType::LengthDelimited =>
                        {
                            self.packed(kind.wire_type(), inner)?;
                        }
                        Kind::Message(message) if !field.is_group() => {
                            self.add(1)?;
                            nest(depth)?;
                            self.fields(Some(&message), &mut inner, None, depth + 1)?;
                        }
                        // Strings, bytes, or a wire type the field does not take (which the
                        // decoder refuses).
                        _ => self.add(1)?,
                    }
                }
                WireType::StartGroup => {
                    self.add(1)?;
                    nest(depth)?;
                    let message = field
                        .filter(|f| f.is_group())
                        .and_then(|f| f.kind().as_message().cloned());
                    self.fields(message.as_ref(), buf, Some(number), depth + 1)?;
                }
                WireType::EndGroup => {
                    if group == Some(number) {
                        return Ok(());
                    }
                    return Err(Refusal::Malformed(
                        "an end-group tag without its group".into(),
                    ));
                }
            }
        }
        match group {
            None => Ok(()),
            Some(_) => Err(Refusal::Malformed("a group without its end".into())),
        }
    }

    /// The elements of a packed field whose values have `wire_type`.
    fn packed(&mut self, wire_type: WireType, mut elements: &[u8]) -> Result<(), Refusal> {
        let width = match wire_type {
            WireType::SixtyFourBit => 8,
            WireType::ThirtyTwoBit => 4,
            _ => {
                while !elements.is_empty() {
                    decode_varint(&mut elements).map_err(malformed)?;
                    self.add(1)?;
                }
                return Ok(());
            }
        };
        if !elements.len().is_multiple_of(width) {
            return Err(Refusal::Malformed(
                "a packed field ends in the middle of a value".into(),
            ));
        }
        self.add(elements.len() / width)
    }
}

/// `Ok` when a message or group may open below `depth`.
fn nest(depth: usize) -> Result<(), Refusal> {
    if depth >= MAX_DEPTH {
        return Err(Refusal::Malformed(format!(
            "messages nested more than {MAX_DEPTH} deep"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use prost_reflect::prost_types::field_descriptor_proto::{Label, Type};
    use prost_reflect::prost_types::{
        DescriptorProto, FieldDescriptorProto, FileDescriptorProto, MessageOptions,
    };
    use prost_reflect::{DescriptorPool, DynamicMessage, MapKey, Value};

    use super::*;

    fn message(name: &str) -> MessageDescriptor {
        crate::proto::descriptor_pool()
            .get_message_by_name(name)
            .unwrap()
    }

    /// A `ListValue` of `nulls` null `Value`s, as a client writes it: four bytes each.
    fn nulls(nulls: usize) -> Vec<u8> {
        [0x0a, 0x02, 0x08, 0x00].repeat(nulls)
    }

    #[test]
    fn exactly_the_budget_passes_and_one_value_more_is_refused() {
        let list = message("google.protobuf.ListValue");
        // Each null is two values: the list's element (a Value message) and its null_value.
        let at_budget = nulls(MAX_VALUES / 2);
        assert_eq!(count(&list, &at_budget, usize::MAX), Ok(MAX_VALUES));
        assert_eq!(check(&list, &at_budget), Ok(()));
        // One more element: an empty Value, one value.
        let mut over = at_budget.clone();
        over.extend_from_slice(&[0x0a, 0x00]);
        assert_eq!(count(&list, &over, usize::MAX), Ok(MAX_VALUES + 1));
        assert_eq!(check(&list, &over), Err(Refusal::OverBudget));
        // What passes decodes; the walk and the decoder read the same bytes.
        let decoded = DynamicMessage::decode(list, at_budget.as_slice()).unwrap();
        assert_eq!(
            decoded
                .get_field_by_name("values")
                .unwrap()
                .as_list()
                .unwrap()
                .len(),
            25_000
        );
    }

    #[test]
    fn a_megabyte_of_nulls_is_refused_before_it_is_all_read() {
        use crate::proto::proto_bytes;
        let request = message("agent_tool_exposure.v1.ValidatePolicyRequest");
        // policy (1) { fields (1) { key (1) "x" value (2) { list_value (6) { 250,000 nulls } } } }
        let mut value = Vec::new();
        proto_bytes(&mut value, 6, &nulls(250_000));
        let mut entry = Vec::new();
        proto_bytes(&mut entry, 1, b"x");
        proto_bytes(&mut entry, 2, &value);
        let mut policy = Vec::new();
        proto_bytes(&mut policy, 1, &entry);
        let mut bytes = Vec::new();
        proto_bytes(&mut bytes, 1, &policy);
        assert!(bytes.len() > 1_000_000, "{}", bytes.len());
        assert_eq!(check(&request, &bytes), Err(Refusal::OverBudget));
        // policy, its entry, the key, the Value, its list_value, then two per null.
        assert_eq!(count(&request, &bytes, usize::MAX), Ok(5 + 500_000));
    }

    /// `message Probe { repeated int32 ints = 1; repeated fixed64 wide = 2; repeated float
    /// floats = 3; map<string, Probe> named = 4; Probe child = 5; string name = 6;
    /// google.protobuf.Value value = 7; }`
    fn probe() -> MessageDescriptor {
        let field = |name: &str, number: i32, label: Label, kind: Type, type_name: &str| {
            FieldDescriptorProto {
                name: Some(name.into()),
                number: Some(number),
                label: Some(label as i32),
                r#type: Some(kind as i32),
                type_name: (!type_name.is_empty()).then(|| type_name.into()),
                json_name: Some(name.into()),
                ..Default::default()
            }
        };
        let entry = DescriptorProto {
            name: Some("NamedEntry".into()),
            field: vec![
                field("key", 1, Label::Optional, Type::String, ""),
                field("value", 2, Label::Optional, Type::Message, ".probe.Probe"),
            ],
            options: Some(MessageOptions {
                map_entry: Some(true),
                ..Default::default()
            }),
            ..Default::default()
        };
        let probe = DescriptorProto {
            name: Some("Probe".into()),
            field: vec![
                field("ints", 1, Label::Repeated, Type::Int32, ""),
                field("wide", 2, Label::Repeated, Type::Fixed64, ""),
                field("floats", 3, Label::Repeated, Type::Float, ""),
                field(
                    "named",
                    4,
                    Label::Repeated,
                    Type::Message,
                    ".probe.Probe.NamedEntry",
                ),
                field("child", 5, Label::Optional, Type::Message, ".probe.Probe"),
                field("name", 6, Label::Optional, Type::String, ""),
                field(
                    "value",
                    7,
                    Label::Optional,
                    Type::Message,
                    ".google.protobuf.Value",
                ),
            ],
            nested_type: vec![entry],
            ..Default::default()
        };
        let file = FileDescriptorProto {
            name: Some("probe.proto".into()),
            package: Some("probe".into()),
            dependency: vec!["google/protobuf/struct.proto".into()],
            message_type: vec![probe],
            syntax: Some("proto3".into()),
            ..Default::default()
        };
        let mut pool: DescriptorPool = crate::proto::descriptor_pool().clone();
        pool.add_file_descriptor_proto(file).unwrap();
        pool.get_message_by_name("probe.Probe").unwrap()
    }

    #[test]
    fn nested_messages_maps_and_packed_fields_count_every_element() {
        let probe = probe();
        let values = |message: &DynamicMessage| {
            count(&probe, &prost::Message::encode_to_vec(message), usize::MAX).unwrap()
        };
        let mut m = DynamicMessage::new(probe.clone());
        m.set_field_by_name("ints", Value::List((0..1000).map(Value::I32).collect()));
        let packed = prost::Message::encode_to_vec(&m);
        assert!(packed.len() < 2100, "packed: {} bytes", packed.len());
        assert_eq!(
            values(&m),
            1000,
            "a packed varint field counts each element"
        );
        assert_eq!(
            count(&probe, &packed, 999),
            Err(Refusal::OverBudget),
            "and stops at the budget"
        );
        m.set_field_by_name("wide", Value::List((0..10).map(Value::U64).collect()));
        m.set_field_by_name("floats", Value::List(vec![Value::F32(1.5); 7]));
        assert_eq!(values(&m), 1017, "packed fixed-width fields too");

        let mut child = DynamicMessage::new(probe.clone());
        child.set_field_by_name("name", Value::String("c".into()));
        child.set_field_by_name("ints", Value::List(vec![Value::I32(1); 3]));
        let mut m = DynamicMessage::new(probe.clone());
        m.set_field_by_name("child", Value::Message(child.clone()));
        // child, its name, its three ints.
        assert_eq!(values(&m), 5);
        let named = (0..4).map(|i| {
            (
                MapKey::String(format!("k{i}")),
                Value::Message(child.clone()),
            )
        });
        m.set_field_by_name("named", Value::Map(named.collect()));
        // Each entry: itself, its key, its value (the 5 values above).
        assert_eq!(values(&m), 5 + 4 * (1 + 1 + 5));

        // A Value holding a Struct holding a list: every level counts.
        let json = r#"{"value": {"a": [null, 1, "two", {"b": true}]}}"#;
        let nested = DynamicMessage::deserialize(
            probe.clone(),
            &mut serde_json::Deserializer::from_str(json),
        )
        .unwrap();
        // value, its struct_value, the entry "a", its key, its Value, that Value's list_value;
        // four elements and the kind each holds; the inner struct's entry "b", its key, its
        // Value, its bool_value.
        assert_eq!(values(&nested), 6 + 4 * 2 + 4);

        // Elements of a packable field sent one by one, and unknown fields, count one each.
        let mut bytes = Vec::new();
        for i in 0..5u8 {
            bytes.extend_from_slice(&[0x08, i]); // ints (1), a varint
        }
        bytes.extend_from_slice(&[0xf8, 0x01, 0x01]); // field 31, a varint
        bytes.extend_from_slice(&[0xfa, 0x01, 0x02, 0x08, 0x01]); // field 31, two bytes
        bytes.extend_from_slice(&[0xfb, 0x01, 0x08, 0x01, 0xfc, 0x01]); // group 31 { 1: 1 }
        assert_eq!(count(&probe, &bytes, usize::MAX), Ok(5 + 1 + 1 + 2));
    }

    #[test]
    fn malformed_wire_bytes_are_refused_as_malformed() {
        let probe = probe();
        let malformed =
            |bytes: &[u8]| matches!(count(&probe, bytes, usize::MAX), Err(Refusal::Malformed(_)));
        assert!(malformed(&[0x08]), "a varint field without its value");
        assert!(malformed(&[0x08, 0xff]), "a varint cut short");
        assert!(
            malformed(&[&[0x08][..], &[0xff; 10], &[0x01]].concat()),
            "a varint of eleven bytes"
        );
        assert!(
            malformed(&[0x32, 0x05, b'a']),
            "a string longer than what is left"
        );
        assert!(
            malformed(&[0x0a, 0x02, 0x01, 0x82]),
            "packed varints cut short"
        );
        assert!(
            malformed(&[0x12, 0x07, 0, 0, 0, 0, 0, 0, 0]),
            "packed fixed64 cut short"
        );
        assert!(
            malformed(&[0x1a, 0x05, 0, 0, 0, 0, 0]),
            "packed floats cut short"
        );
        assert!(
            malformed(&[0x2a, 0x02, 0x32, 0x05]),
            "a child whose field overruns it"
        );
        assert!(malformed(&[0x0e]), "wire type 6");
        assert!(malformed(&[0x0f]), "wire type 7");
        assert!(malformed(&[0x00, 0x00]), "field number 0");
        assert!(malformed(&[0xfb, 0x01]), "a group left open");
        assert!(malformed(&[0xfc, 0x01]), "an end-group tag alone");
        assert!(
            malformed(&[0xfb, 0x01, 0x84, 0x01]),
            "a group closed by another number"
        );
        // A megabyte of groups opening inside each other, and children nested 200 deep: refused
        // at prost's depth, the walk's recursion no deeper.
        assert!(malformed(&[0xfb, 0x01].repeat(500_000)));
        let mut bytes = Vec::new();
        for _ in 0..200 {
            let mut outer = Vec::new();
            crate::proto::proto_bytes(&mut outer, 5, &bytes);
            bytes = outer;
        }
        assert!(malformed(&bytes), "children nested 200 deep");
        assert!(
            DynamicMessage::decode(probe.clone(), bytes.as_slice()).is_err(),
            "which prost does not decode either"
        );
        let mut bytes = Vec::new();
        for _ in 0..MAX_DEPTH {
            let mut outer = Vec::new();
            crate::proto::proto_bytes(&mut outer, 5, &bytes);
            bytes = outer;
        }
        assert_eq!(
            count(&probe, &bytes, usize::MAX),
            Ok(MAX_DEPTH),
            "as deep as prost goes"
        );
        DynamicMessage::decode(probe, bytes.as_slice()).unwrap();
    }
}
