//! The `user_id` message property: which RabbitMQ user a connection publishes as. RabbitMQ
//! refuses (with a channel error) a message whose `user_id` is not its connection's user,
//! so a receiver can trust a present `user_id`. `chimed` stamps its tasks with it and
//! consumers and observers their replies ([`connection_user`]); `chimed` checks replies'
//! against `reply_users`, consumers tasks' against their `scheduler_user`.

use std::str::FromStr;

use lapin::uri::{AMQPUri, SASLMechanism};

/// The user a connection to `amqp_url` logs in as (`guest` when the URL names none, as
/// lapin does), to set as the `user_id` of what it publishes. `None` when it cannot be
/// known from the URL: a URL that does not parse, or `auth_mechanism=external` (the
/// user then comes from the client certificate) or `anonymous`.
pub fn connection_user(amqp_url: &str) -> Option<String> {
    let uri = AMQPUri::from_str(amqp_url).ok()?;
    match uri.query.auth_mechanism.unwrap_or_default() {
        SASLMechanism::External | SASLMechanism::Anonymous => None,
        _ => Some(uri.authority.userinfo.username),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_user_comes_from_the_url() {
        assert_eq!(
            connection_user("amqp://shop-app:s3cret@rabbit:5672/%2f").as_deref(),
            Some("shop-app")
        );
        assert_eq!(
            connection_user("amqp://shop%40eu:pw@rabbit/prod").as_deref(),
            Some("shop@eu")
        );
        assert_eq!(connection_user("amqp://rabbit").as_deref(), Some("guest"));
    }

    #[test]
    fn unknown_when_the_broker_decides_the_user() {
        assert_eq!(
            connection_user("amqps://rabbit/%2f?auth_mechanism=external"),
            None
        );
        assert_eq!(connection_user("not a url"), None);
    }
}
