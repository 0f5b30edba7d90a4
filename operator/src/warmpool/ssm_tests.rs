//! The parameter's name, a refusal read for its code whether SSM or IAM
//! in front of it answered (JSON or XML), and when a parameter is written
//! again.

use crate::warmpool::ssm::*;

#[test]
fn an_xml_refusal_is_read_for_its_code_and_message() {
    let body = b"<?xml version=\"1.0\"?><ErrorResponse><Error><Code>AccessDenied</Code>\
        <Message>User: arn:aws:iam::1:user/op is not authorized to perform: ssm:PutParameter\
        </Message></Error></ErrorResponse>";
    let (code, message) = xml_error(body).expect("read");
    assert_eq!(code, "AccessDenied");
    assert!(message.ends_with("ssm:PutParameter"), "{message}");
    assert_eq!(xml_error(b"<html>Forbidden</html>"), None);
    assert_eq!(xml_error(b"<Code><script></Code>"), None);
    let denied = SsmError::Refused {
        action: "PutParameter",
        name: "/orca/c/ns/s/database-url".into(),
        code,
        message,
    };
    assert!(denied
        .denial()
        .is_some_and(|m| m.contains("ssm:PutParameter")));
    let other = SsmError::Refused {
        action: "PutParameter",
        name: "/orca/c/ns/s/database-url".into(),
        code: "ParameterLimitExceeded".into(),
        message: String::new(),
    };
    assert_eq!(other.denial(), None);
}

#[test]
fn names() {
    assert_eq!(
        parameter_name("prod-eu", "team-a", "orca"),
        "/orca/prod-eu/team-a/orca/database-url"
    );
}

#[test]
fn a_parameter_is_written_again_when_its_value_changes_or_after_a_while() {
    use super::{digest, still_written};
    use std::time::{Duration, Instant};
    let t0 = Instant::now();
    let url = digest("postgres://orca@db/orca");
    let last = Some((url, t0));
    assert!(still_written(
        last.as_ref(),
        &url,
        t0 + Duration::from_secs(299)
    ));
    assert!(
        !still_written(last.as_ref(), &url, t0 + REWRITE),
        "deleted by another meanwhile: written again"
    );
    let rotated = digest("postgres://orca@db2/orca");
    assert!(!still_written(last.as_ref(), &rotated, t0));
    assert!(!still_written(None, &url, t0), "never written");
}
