//! The dashboard's server functions. Each is a public endpoint: it authenticates and authorizes
//! inside (through [`crate::backend::Backend`]) and returns views, never rows. All live under
//! `/ui/…` so they never mix with the REST API under `/api/v2`.

use leptos::prelude::*;

use crate::dto::{
    CreateTokenRequest, CreateUserRequest, CreatedToken, Me, TokenView, UpdateScopesRequest,
    UserView,
};
use crate::error::AppError;

/// Signs in with a password. Works as a plain HTML form before hydration too.
#[server(prefix = "/ui", endpoint = "sign-in")]
pub async fn sign_in(tenant: String, username: String, password: String) -> Result<Me, AppError> {
    let (backend, session) = crate::backend::context().await?;
    backend
        .sign_in(&session, &tenant, &username, &password)
        .await
}

/// Signs out and sends the browser to the sign-in page.
#[server(prefix = "/ui", endpoint = "sign-out")]
pub async fn sign_out() -> Result<(), AppError> {
    let (backend, session) = crate::backend::context().await?;
    backend.sign_out(&session).await?;
    leptos_axum::redirect("/sign-in");
    Ok(())
}

/// The signed-in user, if any.
#[server(prefix = "/ui", endpoint = "me")]
pub async fn current_user() -> Result<Option<Me>, AppError> {
    let (backend, session) = crate::backend::context().await?;
    backend.me(&session).await
}

/// Figures for the overview page.
#[server(name = OverviewFigures, prefix = "/ui", endpoint = "overview")]
pub async fn overview() -> Result<crate::dto::Overview, AppError> {
    let (backend, session) = crate::backend::context().await?;
    backend.overview(&session).await
}

/// Lists the tenant's tokens.
#[server(prefix = "/ui", endpoint = "tokens/list")]
pub async fn list_tokens() -> Result<Vec<TokenView>, AppError> {
    let (backend, session) = crate::backend::context().await?;
    backend.list_tokens(&session).await
}

/// Creates a token and returns its secret (once).
#[server(prefix = "/ui", endpoint = "tokens/create")]
pub async fn create_token(request: CreateTokenRequest) -> Result<CreatedToken, AppError> {
    let (backend, session) = crate::backend::context().await?;
    backend.create_token(&session, request).await
}

/// Revokes a token.
#[server(prefix = "/ui", endpoint = "tokens/revoke")]
pub async fn revoke_token(id: String) -> Result<TokenView, AppError> {
    let (backend, session) = crate::backend::context().await?;
    backend.revoke_token(&session, &id).await
}

/// Lists the tenant's users.
#[server(prefix = "/ui", endpoint = "users/list")]
pub async fn list_users() -> Result<Vec<UserView>, AppError> {
    let (backend, session) = crate::backend::context().await?;
    backend.list_users(&session).await
}

/// Creates a user.
#[server(prefix = "/ui", endpoint = "users/create")]
pub async fn create_user(request: CreateUserRequest) -> Result<UserView, AppError> {
    let (backend, session) = crate::backend::context().await?;
    backend.create_user(&session, request).await
}

/// Replaces a user's scopes.
#[server(prefix = "/ui", endpoint = "users/scopes")]
pub async fn update_user_scopes(
    username: String,
    request: UpdateScopesRequest,
) -> Result<UserView, AppError> {
    let (backend, session) = crate::backend::context().await?;
    backend
        .update_user_scopes(&session, &username, request)
        .await
}
