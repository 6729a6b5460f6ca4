//! The benchmark's HTTP client: `hourglass serve --profile-config`'s profile API.

use serde_json::{json, Value};

use super::reads::Client;
use crate::{Error, Result};

/// Reads through `GET /api/v1/profile/{user}` and `POST /api/v1/profiles:batchGet`, on one
/// agent whose connections the client threads share (kept alive).
pub struct Http {
    agent: ureq::Agent,
    base: String,
    auth: Option<String>,
}

impl Http {
    /// A client of the server at `base` (`http://host:port`), sending `token` if given.
    pub fn new(base: &str, token: Option<&str>) -> Self {
        Http {
            agent: ureq::Agent::config_builder()
                .http_status_as_error(false)
                .build()
                .into(),
            base: base.trim_end_matches('/').to_string(),
            auth: token.map(|t| format!("Bearer {t}")),
        }
    }

    fn failed(&self, what: &str, e: impl std::fmt::Display) -> Error {
        Error::Invalid(format!("{what} at {}: {e}", self.base))
    }

    /// The JSON answer of a request, `None` for a 404.
    fn answer(
        &self,
        what: &str,
        response: std::result::Result<ureq::http::Response<ureq::Body>, ureq::Error>,
    ) -> Result<Option<Value>> {
        let mut response = response.map_err(|e| self.failed(what, e))?;
        let status = response.status().as_u16();
        let body = response
            .body_mut()
            .read_to_string()
            .map_err(|e| self.failed(what, e))?;
        match status {
            200 => serde_json::from_str(&body)
                .map(Some)
                .map_err(|e| self.failed(what, e)),
            404 => Ok(None),
            _ => Err(self.failed(what, format!("HTTP {status}: {body}"))),
        }
    }
}

impl Client for Http {
    fn get(&self, user: &str) -> Result<Option<bool>> {
        let mut request = self
            .agent
            .get(format!("{}/api/v1/profile/{user}", self.base));
        if let Some(auth) = &self.auth {
            request = request.header("Authorization", auth);
        }
        let answer = self.answer("GET /api/v1/profile", request.call())?;
        Ok(answer.map(|a| a["source"] == "cache"))
    }

    fn batch(&self, users: &[String]) -> Result<(u64, u64)> {
        let mut request = self
            .agent
            .post(format!("{}/api/v1/profiles:batchGet", self.base));
        if let Some(auth) = &self.auth {
            request = request.header("Authorization", auth);
        }
        let body = json!({ "users": users }).to_string();
        let what = "POST /api/v1/profiles:batchGet";
        let answer = self
            .answer(what, request.content_type("application/json").send(body))?
            .ok_or_else(|| self.failed(what, "404"))?;
        let profiles = answer["profiles"].as_array().map_or(&[][..], Vec::as_slice);
        let hits = profiles.iter().filter(|p| p["source"] == "cache").count() as u64;
        Ok((hits, profiles.len() as u64 - hits))
    }
}
