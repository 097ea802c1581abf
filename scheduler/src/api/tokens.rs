//! `/v1/tokens`: create, list and revoke API tokens (admin only; the rule is the tokens
//! service's, [`crate::app::Tokens`]).

use axum::{
    Json,
    body::Body,
    extract::{Extension, Path, State},
    http::StatusCode,
    response::IntoResponse,
};

use super::{
    body::{parse_json, read_body},
    dto::{ListResponse, MeResponse, TokenRequest, TokenResponse},
    error::ApiError,
    state::AppState,
};
use crate::domain::access::Caller;

/// The calling token: its name, role, apps and the actions it may take. Any valid
/// token may ask; a client (the web console) shows only what the answer allows.
#[utoipa::path(
    get, path = "/v1/me", operation_id = "whoAmI", tag = "security",
    responses((status = 200, description = "The calling token and what it may do.", body = MeResponse)),
)]
pub(super) async fn me(Extension(caller): Extension<Caller>) -> Json<MeResponse> {
    Json(MeResponse::from(&caller))
}

/// Creates an API token; the answer is the only one that carries its secret.
#[utoipa::path(
    post, path = "/v1/tokens", operation_id = "createToken", tag = "security",
    request_body = TokenRequest,
    responses(
        (status = 201, description = "The token, with its `token` secret.", body = TokenResponse),
        (status = 409, description = "A token has this name (`duplicate_name`).", body = super::error::ErrorBody),
    ),
)]
pub(super) async fn create(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    body: Body,
) -> Result<impl IntoResponse, ApiError> {
    let bytes = read_body(body, state.body_limit()).await?;
    let request: TokenRequest = parse_json(&bytes)?;
    let created = state
        .tokens()
        .create(&caller, &request.name, &request.role, &request.apps)
        .await?;
    let mut answer = TokenResponse::from(&created.token);
    answer.token = Some(created.secret);
    Ok((StatusCode::CREATED, Json(answer)))
}

/// Lists the API tokens (without secrets).
#[utoipa::path(
    get, path = "/v1/tokens", operation_id = "listTokens", tag = "security",
    responses((status = 200, description = "Every token; `next` is always null.", body = ListResponse<TokenResponse>)),
)]
pub(super) async fn list(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
) -> Result<Json<ListResponse<TokenResponse>>, ApiError> {
    let tokens = state.tokens().list(&caller).await?;
    Ok(Json(ListResponse {
        items: tokens.iter().map(TokenResponse::from).collect(),
        next: None,
    }))
}

/// Revokes an API token.
#[utoipa::path(
    delete, path = "/v1/tokens/{name}", operation_id = "revokeToken", tag = "security",
    params(("name" = String, Path, description = "The token's name.")),
    responses(
        (status = 200, description = "The token, revoked.", body = TokenResponse),
        (status = 404, description = "No token with this name (`not_found`).", body = super::error::ErrorBody),
    ),
)]
pub(super) async fn revoke(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
) -> Result<Json<TokenResponse>, ApiError> {
    let token = state.tokens().revoke(&caller, &name).await?;
    Ok(Json(TokenResponse::from(&token)))
}
