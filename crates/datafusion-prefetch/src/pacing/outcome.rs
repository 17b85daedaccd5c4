//! What a request's end says about the store's load.

use std::time::Duration;

/// How a request ended, as far as the store's load goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// The first byte came after this long.
    Answered(Duration),
    /// The client gave up on throttling answers (`503`, `429`): throttled
    /// beyond doubt.
    GaveUp,
    /// Failed otherwise, or dropped before its answer: no evidence.
    NoAnswer,
}

impl Outcome {
    /// A failed request's outcome. object_store's client retries a `503`
    /// or a `429` and, once it gives up, fails with the last status in its
    /// message (`… 503 Service Unavailable …`, `… 429 Too Many Requests …`).
    /// S3 throttles with `503 SlowDown`, GCS with `429` (reason
    /// `rateLimitExceeded`) or `503`, Azure Blob with `503 ServerBusy`; the
    /// attempt counting (`attempts::connector`) counts the same two
    /// statuses as throttled.
    pub(crate) fn of_error(error: &object_store::Error) -> Self {
        let message = error.to_string();
        let throttled = [
            "503 Service Unavailable",
            "429 Too Many Requests",
            "SlowDown",
        ];
        if throttled.iter().any(|answer| message.contains(answer)) {
            Self::GaveUp
        } else {
            Self::NoAnswer
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn generic(message: &str) -> object_store::Error {
        object_store::Error::Generic {
            store: "S3",
            source: message.into(),
        }
    }

    #[test]
    fn a_client_that_gave_up_on_503s_or_429s_is_told_from_other_failures() {
        // As object_store 0.13's retrying client words it.
        let gave_up = generic(
            "Error performing GET http://127.0.0.1/bucket/x.parquet in 12.5s, after 10 \
             retries, max_retries: 10, retry_timeout: 180s  - Server returned non-2xx \
             status code: 503 Service Unavailable: ",
        );
        assert_eq!(Outcome::of_error(&gave_up), Outcome::GaveUp);
        let slow_down = generic("<Error><Code>SlowDown</Code></Error>");
        assert_eq!(Outcome::of_error(&slow_down), Outcome::GaveUp);
        // GCS's and Azure's throttling status, worded as the same client
        // words it after its last retry.
        let too_many = generic(
            "Error performing GET http://127.0.0.1/bucket/x.parquet in 12.5s, after 10 \
             retries, max_retries: 10, retry_timeout: 180s  - Server returned non-2xx \
             status code: 429 Too Many Requests: {\"error\":{\"code\":429,\
             \"errors\":[{\"reason\":\"rateLimitExceeded\"}]}}",
        );
        assert_eq!(Outcome::of_error(&too_many), Outcome::GaveUp);
        for other in [
            generic("Server returned non-2xx status code: 500 Internal Server Error: "),
            object_store::Error::NotFound {
                path: "x".into(),
                source: "404".into(),
            },
        ] {
            assert_eq!(Outcome::of_error(&other), Outcome::NoAnswer);
        }
    }
}
