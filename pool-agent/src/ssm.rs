//! The database URL from SSM Parameter Store (docs/protocol.md#the-database-url):
//! the user-data names a `SecureString` parameter rather than carrying the
//! password, and the agent reads it with the instance's own role. One
//! signed `GetParameter` call (SigV4 by `aws-sigv4`, over the agent's own
//! HTTP), credentials from the environment or else from the instance
//! metadata service, as the AWS SDKs take them. The value is never logged.

use std::time::{Duration, SystemTime};

use aws_credential_types::Credentials;
use aws_sigv4::{
    http_request::{sign, SignableBody, SignableRequest, SigningSettings},
    sign::v4,
};

use crate::{
    http::{call, CallError, Endpoint},
    imds::Imds,
};

/// The bound on one call, connect to last byte.
const CALL_LIMIT: Duration = Duration::from_secs(10);

/// A parameter holding a database URL, and how to reach it.
#[derive(Clone, Debug)]
pub struct Parameter {
    /// `/orca/<cluster>/<namespace>/<scheduler>/database-url`.
    name: String,
    region: String,
    /// SSM's endpoint: `https://ssm.<region>.amazonaws.com` unless given.
    endpoint: Endpoint,
    /// Where the instance role's credentials are read when the environment
    /// has none; `None`: metadata disabled.
    imds: Option<Endpoint>,
}

impl Parameter {
    /// `/orca/<cluster>/<namespace>/<scheduler>/database-url`.
    pub fn name(&self) -> &String {
        &self.name
    }
}

/// Why the parameter could not be read; one line, never its value.
#[derive(Debug, thiserror::Error)]
pub enum SsmError {
    #[error("no AWS credentials: neither AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY nor an instance role (the metadata service is disabled)")]
    NoMetadata,
    #[error("no AWS credentials: the instance has no role (its instance profile grants ssm:GetParameter on the parameter)")]
    NoRole,
    #[error("the instance metadata service: {0}")]
    Imds(CallError),
    #[error("signing the request: {0}")]
    Signing(String),
    #[error("SSM at {endpoint}: {source}")]
    Call {
        endpoint: String,
        #[source]
        source: CallError,
    },
    #[error("SSM refused GetParameter {name}: HTTP {status} {code}: {message}")]
    Refused {
        name: String,
        status: u16,
        code: String,
        message: String,
    },
    #[error("SSM's answer for {0} holds no parameter value")]
    Malformed(String),
}

impl SsmError {
    /// What it means for the instance, on one line, for its console: why
    /// it cannot read its database URL, and what would let it.
    pub fn cause(&self) -> String {
        match self {
            SsmError::Refused { name, code, .. }
                if code.contains("AccessDenied") || code.contains("UnauthorizedOperation") =>
            {
                format!(
                    "the instance's role may not read {name} (ssm:GetParameter): give the role of \
                     its instance profile the policy `orca-operator iam-policy --instance-role \
                     --namespace <namespace>` prints"
                )
            }
            SsmError::Refused { name, code, .. } if code == "ParameterNotFound" => format!(
                "the parameter {name} does not exist where the instance looks: the operator writes \
                 it before a launch, at the pool's ssmEndpoint (or the region's SSM)"
            ),
            SsmError::Call { endpoint, source } => format!(
                "SSM is unreachable at {endpoint} from the instance ({source}): give its subnet a \
                 route to SSM (a VPC endpoint with private DNS, a NAT gateway), or set ssmEndpoint"
            ),
            SsmError::NoRole => "the instance has no role: launch it with an instance profile \
                 (launch.iamInstanceProfile) whose role may read the parameter"
                .to_string(),
            other => other.to_string(),
        }
    }
}

impl Parameter {
    /// The parameter `name` of `region`, at SSM's own endpoint unless
    /// `endpoint` is given.
    pub fn new(
        name: String,
        region: String,
        endpoint: Option<Endpoint>,
        imds: Option<Endpoint>,
    ) -> Self {
        let endpoint = endpoint.unwrap_or_else(|| {
            Endpoint::new(
                format!("ssm.{region}.amazonaws.com:443"),
                format!("ssm.{region}.amazonaws.com"),
                true,
            )
        });
        Parameter {
            name,
            region,
            endpoint,
            imds,
        }
    }

    /// The parameter's value, decrypted.
    pub async fn read(&self) -> Result<String, SsmError> {
        let credentials = self.credentials().await?;
        let body = serde_json::json!({ "Name": self.name, "WithDecryption": true }).to_string();
        let scheme = if self.endpoint.tls() { "https" } else { "http" };
        let url = format!("{scheme}://{}/", self.endpoint.host());
        let unsigned = [
            ("content-type", "application/x-amz-json-1.1"),
            ("x-amz-target", "AmazonSSM.GetParameter"),
        ];
        let identity = credentials.into();
        let params = v4::SigningParams::builder()
            .identity(&identity)
            .region(&self.region)
            .name("ssm")
            .time(SystemTime::now())
            .settings(SigningSettings::default())
            .build()
            .map_err(|e| SsmError::Signing(e.to_string()))?
            .into();
        let signable = SignableRequest::new(
            "POST",
            &url,
            unsigned.iter().copied(),
            SignableBody::Bytes(body.as_bytes()),
        )
        .map_err(|e| SsmError::Signing(e.to_string()))?;
        let (instructions, _) = sign(signable, &params)
            .map_err(|e| SsmError::Signing(e.to_string()))?
            .into_parts();
        let signed: Vec<(String, String)> = instructions
            .headers()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let headers: Vec<(&str, &str)> = unsigned
            .iter()
            .copied()
            .chain(signed.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .collect();
        let (status, answer) = call(
            &self.endpoint,
            "POST",
            "/",
            &headers,
            body.as_bytes(),
            CALL_LIMIT,
        )
        .await
        .map_err(|source| SsmError::Call {
            endpoint: self.endpoint.host().clone(),
            source,
        })?;
        let body = answer;
        let answer: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
        if status != 200 {
            // `__type` may be `namespace#Code`; the message is AWS's own
            // (no value of the parameter is in an error). A refusal by
            // IAM in front of SSM may come as XML (`<Code>`, `<Message>`).
            let text = String::from_utf8_lossy(&body);
            let code = answer["__type"]
                .as_str()
                .or_else(|| element(&text, "Code"))
                .unwrap_or("?");
            let code = code.rsplit('#').next().unwrap_or(code).to_string();
            let message = answer["message"]
                .as_str()
                .or(answer["Message"].as_str())
                .or_else(|| element(&text, "Message"))
                .unwrap_or("")
                .replace('\n', " ");
            return Err(SsmError::Refused {
                name: self.name.clone(),
                status,
                code,
                message,
            });
        }
        answer["Parameter"]["Value"]
            .as_str()
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty())
            .ok_or_else(|| SsmError::Malformed(self.name.clone()))
    }

    /// The environment's keys (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`,
    /// `AWS_SESSION_TOKEN`), else the instance role's.
    async fn credentials(&self) -> Result<Credentials, SsmError> {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        if let (Some(id), Some(secret)) = (var("AWS_ACCESS_KEY_ID"), var("AWS_SECRET_ACCESS_KEY")) {
            return Ok(Credentials::new(
                id,
                secret,
                var("AWS_SESSION_TOKEN"),
                None,
                "environment",
            ));
        }
        let Some(imds) = &self.imds else {
            return Err(SsmError::NoMetadata);
        };
        let keys = Imds::new(imds.clone())
            .credentials()
            .await
            .map_err(SsmError::Imds)?
            .ok_or(SsmError::NoRole)?;
        Ok(Credentials::new(
            keys.access_key_id().clone(),
            keys.secret_access_key().clone(),
            Some(keys.token().clone()),
            None,
            "instance role",
        ))
    }
}

/// The text of XML element `<name>` in `text`, if there is one.
fn element<'a>(text: &'a str, name: &str) -> Option<&'a str> {
    let (_, rest) = text.split_once(&format!("<{name}>"))?;
    rest.split_once(&format!("</{name}>"))
        .map(|(inner, _)| inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_cause_says_what_would_let_the_instance_read_its_url() {
        let refused = |code: &str| SsmError::Refused {
            name: "/orca/c/team-a/orca/database-url".into(),
            status: 400,
            code: code.into(),
            message: "no".into(),
        };
        let denied = refused("AccessDeniedException").cause();
        assert!(
            denied.contains("may not read /orca/c/team-a/orca/database-url (ssm:GetParameter)")
                && denied.contains("iam-policy --instance-role"),
            "{denied}"
        );
        assert!(refused("ParameterNotFound")
            .cause()
            .contains("does not exist"));
        let unreachable = SsmError::Call {
            endpoint: "ssm.eu-west-1.amazonaws.com".into(),
            source: CallError::Timeout(Duration::from_secs(10)),
        }
        .cause();
        assert!(
            unreachable.starts_with("SSM is unreachable at ssm.eu-west-1.amazonaws.com")
                && unreachable.contains("a route to SSM"),
            "{unreachable}"
        );
        assert!(SsmError::NoRole.cause().contains("instance profile"));
        for cause in [denied, unreachable] {
            assert!(!cause.contains('\n'), "one line: {cause}");
        }
    }
}
