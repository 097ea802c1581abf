//! The API's machine-readable description: an OpenAPI 3.1 document generated from the
//! code with `utoipa` (the handlers' `#[utoipa::path]` attributes and the wire types'
//! `ToSchema` derives), served at `GET /v1/openapi.json` to any valid token.
//!
//! How to describe a route (every route of [`super::router`] must be, or
//! `scheduler/tests/api/openapi.rs` fails):
//! 1. Put `#[utoipa::path(...)]` on the handler: the method and the path as the router
//!    mounts it, an `operation_id` (camelCase, unique), a `tag` (one of `tags(...)` in [`ApiDoc`]), its
//!    `params(...)` (path parameters by name; a query struct deriving `IntoParams`), its
//!    `request_body`, and `responses(...)`: each success, and each error status the route
//!    itself can answer (`body = ErrorBody`; 403, 404, 409, ...). Copy a neighbour.
//! 2. Derive `utoipa::ToSchema` on the types it takes and returns (`api/dto/`, and the
//!    domain types they embed; protocol types from `chime-consumer` get a mirror in
//!    [`crate::domain::wire_schema`], named with `#[schema(value_type = ...)]`).
//! 3. Name the handler in `paths(...)` of [`ApiDoc`] below.
//!
//! The errors any route may answer (400 for a malformed request, 401 and 403 on `/v1`,
//! 413, 414, 415, 431, 500, 503) are added to every operation by [`CommonErrors`]; the
//! links schemathesis follows in its stateful phase (create -> read, change, trigger ->
//! run, delete) by [`Links`].

use std::sync::LazyLock;

use axum::{
    Extension,
    http::header,
    response::{IntoResponse, Response},
};
use serde_json::{Value, json};
use utoipa::{
    Modify, OpenApi,
    openapi::{
        ContentBuilder, Ref, RefOr, ResponseBuilder,
        path::Operation,
        security::{HttpAuthScheme, HttpBuilder, SecurityScheme},
    },
};

use super::{
    audit, backfill,
    batch::{self, BatchErrorBody},
    cancel, cluster, consumers, dlq,
    dto::JobRequest,
    error::{ApiError, ErrorBody},
    health, jobs, preview, run_search, run_stats, runs, tokens,
};
use crate::domain::access::{Action, Caller};

/// The document's path.
pub const PATH: &str = "/v1/openapi.json";

/// The OpenAPI document.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "Chime API",
        description = "The HTTP API of chimed, the Chime scheduler. docs/api.md is the readable guide.",
    ),
    paths(
        jobs::create,
        jobs::list,
        batch::create,
        jobs::get,
        jobs::patch,
        jobs::delete,
        jobs::pause,
        jobs::resume,
        jobs::trigger,
        runs::list,
        run_search::search,
        run_stats::stats,
        cancel::cancel,
        backfill::backfill,
        preview::job,
        preview::schedule,
        runs::get,
        cluster::status,
        consumers::list,
        dlq::list,
        dlq::peek,
        dlq::replay,
        dlq::purge,
        tokens::create,
        tokens::list,
        tokens::me,
        tokens::revoke,
        audit::list,
        audit::versions,
        health::healthz,
        health::readyz,
        health::metrics,
        document,
    ),
    components(schemas(ErrorBody, BatchErrorBody, JobRequest)),
    modifiers(&Security, &JobPatch, &CommonErrors),
    security(("bearer" = [])),
    tags(
        (name = "jobs", description = "Jobs: create, read, change, delete, pause, resume, trigger, preview."),
        (name = "runs", description = "Runs: one fire of a job (one per item)."),
        (name = "operations", description = "Cluster, consumers, health and metrics."),
        (name = "dlq", description = "Dead-letter queues: list, peek, replay, purge."),
        (name = "security", description = "API tokens and the audit trail."),
    )
)]
pub struct ApiDoc;

/// The document as served, built once.
static DOCUMENT: LazyLock<String> = LazyLock::new(|| {
    let mut doc =
        serde_json::to_value(ApiDoc::openapi()).unwrap_or_else(|e| json!({"error": e.to_string()}));
    Links::add(&mut doc);
    unsigned_ranges(&mut doc);
    doc.to_string()
});

/// utoipa names unsigned integers by formats no OpenAPI tool knows (`u-int32`, with the
/// `non_strict_integers` feature; without it, `int32`, whose range wrongly stops at
/// 2^31 - 1 and made schemathesis call an accepted `limit` of 4 142 965 447 invalid).
/// The document states the range itself instead: minimum 0, maximum the type's largest.
fn unsigned_ranges(value: &mut Value) {
    match value {
        Value::Object(object) => {
            let maximum = match object.get("format").and_then(Value::as_str) {
                Some("u-int8") => Some(json!(u8::MAX)),
                Some("u-int16") => Some(json!(u16::MAX)),
                Some("u-int32") => Some(json!(u32::MAX)),
                Some("u-int64") => Some(json!(u64::MAX)),
                _ => None,
            };
            if let Some(maximum) = maximum {
                object.remove("format");
                object.entry("minimum").or_insert(json!(0));
                object.entry("maximum").or_insert(maximum);
            }
            object.values_mut().for_each(unsigned_ranges);
        }
        Value::Array(items) => items.iter_mut().for_each(unsigned_ranges),
        _ => {}
    }
}

/// The document, as JSON text.
pub fn document_json() -> &'static str {
    &DOCUMENT
}

/// Answers the OpenAPI document.
#[utoipa::path(
    get, path = "/v1/openapi.json", operation_id = "getOpenApi", tag = "operations",
    responses((status = 200, description = "This API's OpenAPI 3.1 document.", content_type = "application/json", body = Object)),
)]
pub(super) async fn document(Extension(caller): Extension<Caller>) -> Result<Response, ApiError> {
    caller.check(Action::ReadApiDescription, None)?;
    Ok((
        [(header::CONTENT_TYPE, "application/json")],
        document_json(),
    )
        .into_response())
}

/// The bearer token scheme.
struct Security;

impl Modify for Security {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some("An API token: `Authorization: Bearer <token>`."))
                    .build(),
            ),
        );
    }
}

/// `JobPatch`: the body of `PATCH /v1/jobs/{id}`, derived from `JobRequest` so new job
/// fields appear in both: every field optional, plus `version` and the read-only fields
/// a job read with GET carries (ignored).
struct JobPatch;

impl Modify for JobPatch {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::schema::{Object, ObjectBuilder, Schema, Type};
        let components = openapi.components.get_or_insert_with(Default::default);
        let Some(RefOr::T(Schema::Object(request))) = components.schemas.get("JobRequest") else {
            return;
        };
        let mut patch: Object = request.clone();
        patch.required.clear();
        patch.example = None;
        patch.description = Some(
            "The fields to change; the rest keep their values. `version` (or an If-Match \
             header) makes the change conditional on the job's version; `id`, `next_fire_at`, \
             `created_at` and `updated_at` are ignored, so a job read with GET can be sent back."
                .into(),
        );
        patch.properties.insert(
            "version".into(),
            RefOr::T(Schema::Object(
                ObjectBuilder::new()
                    .schema_type(Type::Integer)
                    .format(Some(utoipa::openapi::SchemaFormat::KnownFormat(
                        utoipa::openapi::KnownFormat::Int64,
                    )))
                    .description(Some("The job version read before."))
                    .build(),
            )),
        );
        for ignored in ["id", "next_fire_at", "created_at", "updated_at"] {
            patch.properties.insert(
                ignored.into(),
                RefOr::T(Schema::Object(
                    ObjectBuilder::new().description(Some("Ignored.")).build(),
                )),
            );
        }
        components
            .schemas
            .insert("JobPatch".into(), RefOr::T(Schema::Object(patch)));
        let update = openapi
            .paths
            .paths
            .get_mut("/v1/jobs/{id}")
            .and_then(|item| item.patch.as_mut());
        if let Some(update) = update {
            update.request_body = Some(
                utoipa::openapi::request_body::RequestBodyBuilder::new()
                    .description(Some("The fields to change (`JobPatch`)."))
                    .content(
                        "application/json",
                        ContentBuilder::new()
                            .schema(Some(Ref::from_schema_name("JobPatch")))
                            .build(),
                    )
                    .required(Some(utoipa::openapi::Required::True))
                    .build(),
            );
        }
    }
}

/// The errors any route may answer, added to every operation that does not list them.
struct CommonErrors;

impl CommonErrors {
    const ANY: [(&'static str, &'static str); 7] = [
        (
            "400",
            "Malformed request (`bad_request`, `invalid_json`, `invalid_field`).",
        ),
        ("413", "Body over the limit (`payload_too_large`)."),
        ("414", "Request target too long (`uri_too_long`)."),
        (
            "415",
            "A body with a non-JSON Content-Type (`unsupported_media_type`).",
        ),
        (
            "431",
            "Request headers too many or too large (`headers_too_large`).",
        ),
        ("500", "Unexpected failure (`internal`)."),
        (
            "503",
            "A dependency is unavailable; retry later (`unavailable`).",
        ),
    ];
    const AUTHENTICATED: [(&'static str, &'static str); 2] = [
        ("401", "No valid API token (`unauthorized`)."),
        (
            "403",
            "The token's role or apps do not allow this (`forbidden`).",
        ),
    ];
}

impl Modify for CommonErrors {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        for (path, item) in openapi.paths.paths.iter_mut() {
            let authenticated = path.starts_with("/v1/") || path == "/metrics";
            for operation in operations(item) {
                let extra = authenticated.then_some(Self::AUTHENTICATED).into_iter();
                for (status, description) in Self::ANY.into_iter().chain(extra.flatten()) {
                    operation
                        .responses
                        .responses
                        .entry(status.into())
                        .or_insert_with(|| error_response(description));
                }
            }
        }
    }
}

/// A response with the JSON error body.
pub fn error_response(description: &str) -> RefOr<utoipa::openapi::Response> {
    RefOr::T(
        ResponseBuilder::new()
            .description(description)
            .content(
                "application/json",
                ContentBuilder::new()
                    .schema(Some(Ref::from_schema_name("ErrorBody")))
                    .build(),
            )
            .build(),
    )
}

fn operations(item: &mut utoipa::openapi::PathItem) -> impl Iterator<Item = &mut Operation> {
    [
        item.get.as_mut(),
        item.put.as_mut(),
        item.post.as_mut(),
        item.delete.as_mut(),
        item.patch.as_mut(),
    ]
    .into_iter()
    .flatten()
}

/// OpenAPI links: how an answer's ids feed the next request, for clients and for
/// schemathesis' stateful phase.
struct Links;

impl Links {
    /// (operation, status, link name, target operation, parameter, runtime expression).
    const LINKS: [(
        &'static str,
        &'static str,
        &'static str,
        &'static str,
        &'static str,
        &'static str,
    ); 14] = [
        (
            "createJob",
            "201",
            "GetJob",
            "getJob",
            "id",
            "$response.body#/id",
        ),
        (
            "createJob",
            "201",
            "UpdateJob",
            "updateJob",
            "id",
            "$response.body#/id",
        ),
        (
            "createJob",
            "201",
            "PauseJob",
            "pauseJob",
            "id",
            "$response.body#/id",
        ),
        (
            "createJob",
            "201",
            "ResumeJob",
            "resumeJob",
            "id",
            "$response.body#/id",
        ),
        (
            "createJob",
            "201",
            "TriggerJob",
            "triggerJob",
            "id",
            "$response.body#/id",
        ),
        (
            "createJob",
            "201",
            "ListJobRuns",
            "listJobRuns",
            "id",
            "$response.body#/id",
        ),
        (
            "createJob",
            "201",
            "PreviewJob",
            "previewJob",
            "id",
            "$response.body#/id",
        ),
        (
            "createJob",
            "201",
            "ListJobVersions",
            "listJobVersions",
            "id",
            "$response.body#/id",
        ),
        (
            "createJob",
            "201",
            "DeleteJob",
            "deleteJob",
            "id",
            "$response.body#/id",
        ),
        (
            "updateJob",
            "200",
            "TriggerJob",
            "triggerJob",
            "id",
            "$response.body#/id",
        ),
        (
            "updateJob",
            "200",
            "DeleteJob",
            "deleteJob",
            "id",
            "$response.body#/id",
        ),
        (
            "triggerJob",
            "202",
            "GetRun",
            "getRun",
            "id",
            "$response.body#/id",
        ),
        (
            "triggerJob",
            "202",
            "ListJobRuns",
            "listJobRuns",
            "id",
            "$response.body#/job_id",
        ),
        (
            "createToken",
            "201",
            "RevokeToken",
            "revokeToken",
            "name",
            "$response.body#/name",
        ),
    ];
}

impl Links {
    /// Adds the links to the document's JSON. (utoipa 5's `Link` writes `operation_id`,
    /// not the `operationId` OpenAPI names, so they are added here.)
    fn add(doc: &mut Value) {
        let Some(paths) = doc.get_mut("paths").and_then(Value::as_object_mut) else {
            return;
        };
        for operation in paths
            .values_mut()
            .filter_map(Value::as_object_mut)
            .flat_map(|item| item.values_mut())
        {
            let Some(id) = operation["operationId"].as_str().map(str::to_owned) else {
                continue;
            };
            for (from, status, name, to, parameter, expression) in Self::LINKS {
                if from != id {
                    continue;
                }
                if let Some(response) = operation
                    .get_mut("responses")
                    .and_then(|r| r.get_mut(status))
                    .and_then(Value::as_object_mut)
                {
                    let links = response.entry("links").or_insert_with(|| json!({}));
                    // Qualified `path.<name>`: an unqualified name also matches a body property of the
                    // same name (`JobPatch` has an ignored `id`), and schemathesis then replaced the
                    // generated body with `{"id": ...}`.
                    links[name] = json!({"operationId": to, "parameters": {format!("path.{parameter}"): expression}});
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc() -> Value {
        serde_json::from_str(document_json()).unwrap()
    }

    #[test]
    fn the_document_is_openapi_3_1_with_unique_operation_ids() {
        let doc = doc();
        assert!(
            doc["openapi"].as_str().unwrap().starts_with("3.1"),
            "{}",
            doc["openapi"]
        );
        let mut ids = std::collections::BTreeSet::new();
        for (path, item) in doc["paths"].as_object().unwrap() {
            for (method, operation) in item.as_object().unwrap() {
                let id = operation["operationId"].as_str().unwrap_or_default();
                assert!(!id.is_empty(), "{method} {path} has no operationId");
                assert!(ids.insert(id.to_string()), "operationId {id} twice");
            }
        }
    }

    #[test]
    fn every_link_names_an_operation_of_the_document() {
        let doc = doc();
        let ids: Vec<String> = doc["paths"]
            .as_object()
            .unwrap()
            .values()
            .flat_map(|item| item.as_object().unwrap().values())
            .filter_map(|op| op["operationId"].as_str().map(str::to_string))
            .collect();
        let mut links = 0;
        for (from, status, name, to, _, _) in Links::LINKS {
            assert!(ids.iter().any(|id| id == to), "link {name} to unknown {to}");
            assert!(
                ids.iter().any(|id| id == from),
                "link {name} from unknown {from}"
            );
            links += 1;
            let _ = status;
        }
        let text = document_json();
        assert_eq!(
            text.matches("\"operationId\":\"").count(),
            ids.len() + links
        );
        assert!(!text.contains("operation_id"));
    }

    #[test]
    fn every_error_answer_has_the_json_error_body() {
        let doc = doc();
        for (path, item) in doc["paths"].as_object().unwrap() {
            for (method, operation) in item.as_object().unwrap() {
                for (status, response) in operation["responses"].as_object().unwrap() {
                    if (status.starts_with('4') || status.starts_with('5')) && path != "/readyz" {
                        let schema = &response["content"]["application/json"]["schema"]["$ref"];
                        assert!(
                            schema.as_str().is_some_and(|s| s.ends_with("ErrorBody")),
                            "{method} {path} {status}: {response}"
                        );
                    }
                }
            }
        }
    }
}
