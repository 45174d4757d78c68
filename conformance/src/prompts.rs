//! The fixture prompts, and argument completion for them.
//!
//! `test_input_required_result_prompt` shows that SEP-2322's input rounds are not only for
//! tools: on the stateless wire it first asks the user for a context.

use rmcp::model::{
    CacheScope, CompleteRequestParams, CompleteResult, CompletionInfo, ContentBlock, ErrorData,
    GetPromptRequestParams, GetPromptResponse, GetPromptResult, InputRequests, InputRequiredResult,
    ListPromptsResult, Prompt, PromptArgument, PromptMessage, Reference, ResourceContents, Role,
};
use serde_json::json;

use crate::fixtures::PNG_BASE64;
use crate::input;
use crate::wire::Wire;

/// The values `completion/complete` offers for the arguments of `test_prompt_with_arguments`.
const COMPLETIONS: &[&str] = &["test", "testValue1", "testValue2", "example"];

/// `prompts/list`: every prompt has a description.
pub fn list(wire: Wire) -> ListPromptsResult {
    let argument = |name: &str, description: &str| {
        PromptArgument::new(name)
            .with_description(description)
            .with_required(true)
    };
    let prompts = vec![
        Prompt::new(
            "test_simple_prompt",
            Some("A simple prompt without arguments"),
            None,
        ),
        Prompt::new(
            "test_prompt_with_arguments",
            Some("A prompt with two required arguments"),
            Some(vec![
                argument("arg1", "First test argument"),
                argument("arg2", "Second test argument"),
            ]),
        ),
        Prompt::new(
            "test_prompt_with_embedded_resource",
            Some("A prompt that embeds a resource"),
            Some(vec![argument(
                "resourceUri",
                "URI of the resource to embed",
            )]),
        ),
        Prompt::new(
            "test_prompt_with_image",
            Some("A prompt that includes an image"),
            None,
        ),
        Prompt::new(
            "test_input_required_result_prompt",
            Some("A prompt that first asks the user for a context (SEP-2322)"),
            None,
        ),
    ];
    wire.cacheable(
        ListPromptsResult::with_all_items(prompts),
        CacheScope::Public,
    )
}

/// `prompts/get`.
pub fn get(params: &GetPromptRequestParams) -> Result<GetPromptResponse, ErrorData> {
    let argument = |name: &str| {
        params
            .arguments
            .as_ref()
            .and_then(|arguments| arguments.get(name)?.as_str())
            .ok_or_else(|| {
                ErrorData::invalid_params(format!("The argument `{name}` is required"), None)
            })
    };
    let messages = match params.name.as_str() {
        "test_simple_prompt" => vec![user_text("This is a simple prompt for testing.")],
        "test_prompt_with_arguments" => {
            let (arg1, arg2) = (argument("arg1")?, argument("arg2")?);
            vec![user_text(&format!(
                "Prompt with arguments: arg1='{arg1}', arg2='{arg2}'"
            ))]
        }
        "test_prompt_with_embedded_resource" => {
            let resource = ResourceContents::text(
                "Embedded resource content for testing.",
                argument("resourceUri")?,
            )
            .with_mime_type("text/plain");
            vec![
                PromptMessage::new(Role::User, ContentBlock::resource(resource)),
                user_text("Please process the embedded resource above."),
            ]
        }
        "test_prompt_with_image" => vec![
            PromptMessage::new(Role::User, ContentBlock::image(PNG_BASE64, "image/png")),
            user_text("Please analyze the image above."),
        ],
        "test_input_required_result_prompt" => return with_context(params),
        other => {
            return Err(ErrorData::invalid_params(
                format!("Unknown prompt: {other}"),
                Some(json!({ "name": other })),
            ));
        }
    };
    Ok(GetPromptResult::new(messages).into())
}

/// `completion/complete`: the known values that start with what the user typed, for the
/// arguments of `test_prompt_with_arguments`; nothing for anything else.
pub fn complete(params: &CompleteRequestParams) -> Result<CompleteResult, ErrorData> {
    let values = match &params.r#ref {
        Reference::Prompt(prompt) if prompt.name == "test_prompt_with_arguments" => COMPLETIONS
            .iter()
            .filter(|value| value.starts_with(params.argument.value.as_str()))
            .map(|value| (*value).to_owned())
            .collect(),
        _ => Vec::new(),
    };
    let completion = CompletionInfo::with_all_values(values)
        .map_err(|error| ErrorData::internal_error(error, None))?;
    Ok(CompleteResult::new(completion))
}

/// `test_input_required_result_prompt`: asks for a context (key `user_context`), then returns a
/// prompt built on it.
fn with_context(params: &GetPromptRequestParams) -> Result<GetPromptResponse, ErrorData> {
    let answer = input::answer(params.input_responses.as_ref(), "user_context");
    if let Some(context) = answer.and_then(|answer| input::content_text(answer, "context")) {
        let message = user_text(&format!("Prompt with context: {context}"));
        return Ok(GetPromptResult::new(vec![message]).into());
    }
    let question = input::elicitation(
        "What context should the prompt use?",
        json!({ "context": { "type": "string" } }),
        &["context"],
    )?;
    let questions = InputRequests::from([("user_context".to_owned(), question)]);
    Ok(InputRequiredResult::from_input_requests(questions).into())
}

fn user_text(text: &str) -> PromptMessage {
    PromptMessage::new_text(Role::User, text)
}
