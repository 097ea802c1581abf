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
    dto::{ListResponse, TokenRequest, TokenResponse},
    error::ApiError,
    state::AppState,
};
use crate::domain::access::Caller;

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

pub(super) async fn revoke(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
) -> Result<Json<TokenResponse>, ApiError> {
    let token = state.tokens().revoke(&caller, &name).await?;
    Ok(Json(TokenResponse::from(&token)))
}
