//! The parameter's name, and a refusal read for its code whether SSM or
//! IAM in front of it answered (JSON or XML).

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
