//! Errors of demand reads: the store's own error, its kind kept (so a caller
//! can still tell a missing object from bad data, as without prefetching), with
//! the file and byte ranges the decoder asked for added to its message.

use std::error::Error;
use std::fmt;

use parquet::errors::ParquetError;

type Source = Box<dyn Error + Send + Sync + 'static>;

/// An error's message prefixed with what was being read.
#[derive(Debug)]
struct Reading {
    what: String,
    source: Source,
}

impl fmt::Display for Reading {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.what, self.source)
    }
}

impl Error for Reading {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        Some(self.source.as_ref())
    }
}

/// `error`, said of `what` (e.g. "reading data/f.parquet bytes [4..1024]").
///
/// A store error keeps its `object_store::Error` variant; any other error
/// becomes a `ParquetError::General` with the same message.
pub(crate) fn reading(what: String, error: ParquetError) -> ParquetError {
    match error {
        ParquetError::External(inner) => match inner.downcast::<object_store::Error>() {
            Ok(store) => ParquetError::External(Box::new(store_error(what, *store))),
            Err(other) => ParquetError::External(Box::new(Reading {
                what,
                source: other,
            })),
        },
        other => ParquetError::General(format!("{what}: {other}")),
    }
}

/// An error of our own about a read, of the store-error kind `off` would see
/// from the store for it (`Generic`).
pub(crate) fn refused(message: String) -> ParquetError {
    ParquetError::External(Box::new(object_store::Error::Generic {
        store: "datafusion-prefetch",
        source: message.into(),
    }))
}

fn store_error(what: String, error: object_store::Error) -> object_store::Error {
    use object_store::Error::*;
    let wrap = |source: Source| -> Source { Box::new(Reading { what, source }) };
    match error {
        Generic { store, source } => Generic {
            store,
            source: wrap(source),
        },
        NotFound { path, source } => NotFound {
            path,
            source: wrap(source),
        },
        PermissionDenied { path, source } => PermissionDenied {
            path,
            source: wrap(source),
        },
        Unauthenticated { path, source } => Unauthenticated {
            path,
            source: wrap(source),
        },
        Precondition { path, source } => Precondition {
            path,
            source: wrap(source),
        },
        NotModified { path, source } => NotModified {
            path,
            source: wrap(source),
        },
        AlreadyExists { path, source } => AlreadyExists {
            path,
            source: wrap(source),
        },
        NotSupported { source } => NotSupported {
            source: wrap(source),
        },
        // No free-form source to carry the context: the store's message says
        // enough on its own.
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_errors_keep_their_kind_and_gain_the_file_and_ranges() {
        let not_found = ParquetError::External(Box::new(object_store::Error::NotFound {
            path: "data/f.parquet".into(),
            source: "404".into(),
        }));
        let error = reading("reading data/f.parquet bytes [4..10]".into(), not_found);
        let ParquetError::External(inner) = &error else {
            panic!("{error:?}");
        };
        assert!(matches!(
            inner.downcast_ref::<object_store::Error>(),
            Some(object_store::Error::NotFound { .. })
        ));
        assert!(error.to_string().contains("bytes [4..10]: 404"), "{error}");

        let decode = reading("reading f".into(), ParquetError::EOF("short".into()));
        assert!(matches!(decode, ParquetError::General(ref m) if m == "reading f: EOF: short"));
    }
}
