//! Dashboard users as a service: the one implementation behind `GET/POST /users`,
//! `PUT /users/{username}/scopes`, the dashboard's Users page and `aperture admin create-user`.

use engine::scope::{self, ScopeSet};

use aperture_types::dto::{CreateUserRequest, UpdateScopesRequest, UserView};
use aperture_types::error::{AppError, ErrorCode, FieldError};

use crate::error::ServiceError;
use crate::journal::{Author, Journal};
use crate::password::{self, Passwords};
use crate::principal::Principal;
use crate::store::{self, Store, users::UserRow};
use engine::receipt::{Decision, ReasonCode};
use serde_json::json;

/// Whether `name` is an acceptable username: 1–64 characters of `[a-z0-9_.-]`.
pub fn is_valid_username(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"_.-".contains(&b))
}

/// A user as listed (never the hash).
pub fn view(row: UserRow) -> UserView {
    UserView {
        id: row.id,
        username: row.username,
        scopes: row.scopes,
        created_at: store::rfc3339(row.created_at),
        created_by: row.created_by,
        environments: row.environments,
    }
}

fn parse_scopes(scopes: &[String], fields: &mut Vec<FieldError>) -> Option<ScopeSet> {
    match ScopeSet::parse(scopes) {
        Ok(s) => Some(s),
        Err(e) => {
            fields.push(FieldError {
                path: format!("scopes[{}]", e.index),
                message: e.error.to_string(),
            });
            None
        }
    }
}

/// Creates a user without a scope check (the operator's command line); principals go through
/// [`create`].
pub async fn create_unchecked(
    store: &Store,
    journal: &Journal,
    passwords: &Passwords,
    tenant_id: &str,
    by: &Author,
    request: &CreateUserRequest,
) -> Result<UserView, ServiceError> {
    let mut fields = Vec::new();
    if !is_valid_username(&request.username) {
        fields.push(FieldError {
            path: "username".into(),
            message: "1–64 characters of a-z, 0-9, _ . -".into(),
        });
    }
    let len = request.password.chars().count();
    if len < password::MIN_LEN {
        fields.push(FieldError {
            path: "password".into(),
            message: format!("at least {} characters", password::MIN_LEN),
        });
    } else if request.password.len() > password::MAX_LEN {
        fields.push(FieldError {
            path: "password".into(),
            message: format!("at most {} bytes", password::MAX_LEN),
        });
    }
    let scopes = parse_scopes(&request.scopes, &mut fields);
    let environments = crate::principal::environments_of(
        request.environments.as_deref(),
        "environments",
        &mut fields,
    );
    let (true, Some(scopes)) = (fields.is_empty(), scopes) else {
        return Err(AppError::invalid(fields).into());
    };
    if store::users::find(store, tenant_id, &request.username)
        .await?
        .is_some()
    {
        return Err(username_taken(&request.username).into());
    }
    let scopes: Vec<String> = scopes.into();
    journal
        .admin(
            tenant_id,
            by,
            Decision::Allow,
            ReasonCode::Ok,
            "user.create",
            json!({"username": request.username, "scopes": scopes, "environments": environments}),
        )
        .await?;
    let hash = passwords.hash(request.password.clone()).await?;
    let row = store::users::insert(
        store,
        tenant_id,
        &request.username,
        &hash,
        &scopes,
        &by.actor_id,
        &environments,
    )
    .await?
    .ok_or_else(|| username_taken(&request.username))?;
    tracing::info!(tenant = %tenant_id, username = %row.username, created_by = %by.actor_id, "user created");
    Ok(view(row))
}

fn username_taken(name: &str) -> AppError {
    AppError {
        code: ErrorCode::Conflict,
        message: format!("the username {name} is taken"),
        details: Some(aperture_types::error::ErrorDetails {
            fields: vec![FieldError {
                path: "username".into(),
                message: "already taken".into(),
            }],
        }),
    }
}

/// `POST /users` (admin).
pub async fn create(
    store: &Store,
    journal: &Journal,
    passwords: &Passwords,
    principal: &Principal,
    request: &CreateUserRequest,
) -> Result<UserView, ServiceError> {
    principal.require(scope::ADMIN)?;
    create_unchecked(
        store,
        journal,
        passwords,
        &principal.tenant_id,
        &principal.author(),
        request,
    )
    .await
}

/// `GET /users` (admin).
pub async fn list(store: &Store, principal: &Principal) -> Result<Vec<UserView>, ServiceError> {
    principal.require(scope::ADMIN)?;
    Ok(store::users::list(store, &principal.tenant_id)
        .await?
        .into_iter()
        .map(view)
        .collect())
}

/// `PUT /users/{username}/scopes` (admin).
pub async fn update_scopes(
    store: &Store,
    journal: &Journal,
    principal: &Principal,
    username: &str,
    request: &UpdateScopesRequest,
) -> Result<UserView, ServiceError> {
    principal.require(scope::ADMIN)?;
    let mut fields = Vec::new();
    let scopes = parse_scopes(&request.scopes, &mut fields);
    let environments = request.environments.as_deref().map(|requested| {
        crate::principal::environments_of(Some(requested), "environments", &mut fields)
    });
    let (true, Some(scopes)) = (fields.is_empty(), scopes) else {
        return Err(AppError::invalid(fields).into());
    };
    let scopes: Vec<String> = scopes.into();
    if store::users::find(store, &principal.tenant_id, username)
        .await?
        .is_none()
    {
        return Err(AppError::not_found("user").into());
    }
    journal
        .admin(
            &principal.tenant_id,
            &principal.author(),
            Decision::Allow,
            ReasonCode::Ok,
            "user.scopes",
            json!({"username": username, "scopes": scopes, "environments": environments}),
        )
        .await?;
    match store::users::set_access(
        store,
        &principal.tenant_id,
        username,
        &scopes,
        environments.as_deref(),
    )
    .await?
    {
        Some(row) => {
            tracing::info!(username = %row.username, by = %principal.actor_id, "user scopes changed");
            Ok(view(row))
        }
        None => Err(AppError::not_found("user").into()),
    }
}

/// What start-up found about the first administrator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Bootstrap {
    /// The database already had users.
    HasUsers,
    /// User `admin` was created from `APERTURE_BOOTSTRAP_ADMIN_PASSWORD`.
    CreatedAdmin,
    /// No users and no bootstrap password: somebody has to create the first admin.
    NeedsAdmin,
}

/// Creates the default tenant, and user `admin` when there is no user and a bootstrap password
/// is given. There is never a default password.
pub async fn bootstrap(
    store: &Store,
    journal: &Journal,
    passwords: &Passwords,
    admin_password: Option<&str>,
) -> anyhow::Result<Bootstrap> {
    store::tenants::ensure(store, store::tenants::DEFAULT_TENANT).await?;
    if store::users::count_all(store).await? > 0 {
        return Ok(Bootstrap::HasUsers);
    }
    let Some(password) = admin_password.filter(|p| !p.is_empty()) else {
        return Ok(Bootstrap::NeedsAdmin);
    };
    let request = CreateUserRequest {
        username: "admin".into(),
        password: password.to_owned(),
        scopes: engine::scope::ScopeSet::all_aperture().into(),
        // The installation's first admin, like everything made before environments: all of them.
        environments: Some(vec![engine::environment::ANY_ENVIRONMENT.to_owned()]),
    };
    create_unchecked(
        store,
        journal,
        passwords,
        store::tenants::DEFAULT_TENANT,
        &crate::journal::Author::new("bootstrap", crate::journal::OPERATOR),
        &request,
    )
    .await
    .map_err(|e| anyhow::anyhow!("creating the bootstrap admin: {}", e.into_app_error()))?;
    tracing::info!(
        "created user `admin` in tenant `default` from APERTURE_BOOTSTRAP_ADMIN_PASSWORD"
    );
    Ok(Bootstrap::CreatedAdmin)
}
