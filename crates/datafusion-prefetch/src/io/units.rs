//! The scan's files and their ids: each scan unit (an object, or a byte range
//! of one) is known by its position in the scan's file list.

use std::collections::HashMap;
use std::sync::Arc;

use datafusion_datasource::PartitionedFile;
use object_store::ObjectStore;
use object_store::path::Path;

use crate::scheduler::FileId;
use crate::sharing::{KeptKey, ObjectKey};

/// What tells two scan units apart: the object and the byte range.
type UnitKey = (Path, Option<(i64, i64)>);

fn key(file: &PartitionedFile) -> UnitKey {
    (
        file.object_meta.location.clone(),
        file.range.as_ref().map(|r| (r.start, r.end)),
    )
}

/// A scan's files, by [`FileId`], with a map back from each file to its id
/// (so setting up a scan of many files is linear in their number).
#[derive(Debug)]
pub(crate) struct ScanUnits {
    files: Vec<PartitionedFile>,
    ids: HashMap<UnitKey, FileId>,
    /// The object store's URL (`s3://bucket/`, `file:///`), to name files
    /// in errors as the user gave them.
    store_url: Arc<str>,
}

impl ScanUnits {
    /// `files` of the store at `store_url` (the scan's `ObjectStoreUrl`).
    pub(crate) fn new(store_url: &str, files: Vec<PartitionedFile>) -> Self {
        let mut ids = HashMap::with_capacity(files.len());
        for (id, file) in files.iter().enumerate() {
            // A unit listed twice is known by its first position.
            ids.entry(key(file)).or_insert(id);
        }
        Self {
            files,
            ids,
            store_url: store_url.into(),
        }
    }

    /// The file of `id` as a user names it: a local file by its path
    /// (`/data/f.parquet`; an object path has no leading `/`), any other by
    /// its URL (`s3://bucket/data/f.parquet`).
    pub(crate) fn display(&self, id: FileId) -> String {
        let location = &self.files[id].object_meta.location;
        match self.store_url.strip_prefix("file://") {
            Some(_) => format!("/{location}"),
            None => format!("{}{location}", self.store_url),
        }
    }

    /// The id of `file` (the same object and byte range), if the scan has it.
    pub(crate) fn id(&self, file: &PartitionedFile) -> Option<FileId> {
        self.ids.get(&key(file)).copied()
    }

    /// The file of `id`.
    pub(crate) fn file(&self, id: FileId) -> &PartitionedFile {
        &self.files[id]
    }

    /// The object version `id` reads, as scans sharing reads know it.
    pub(crate) fn object(&self, id: FileId) -> ObjectKey {
        let meta = &self.files[id].object_meta;
        ObjectKey {
            store: Arc::clone(&self.store_url),
            location: meta.location.clone(),
            size: meta.size,
            modified: meta.last_modified.timestamp_micros(),
        }
    }

    /// The object version `id` reads in `store`, as planning kept it.
    pub(crate) fn kept_key(&self, store: &Arc<dyn ObjectStore>, id: FileId) -> KeptKey {
        let meta = &self.files[id].object_meta;
        KeptKey::new(
            store,
            meta.location.clone(),
            meta.size,
            meta.last_modified.timestamp_micros(),
        )
    }

    /// All the files, in id order.
    pub(crate) fn files(&self) -> &[PartitionedFile] {
        &self.files
    }

    /// How many there are.
    pub(crate) fn len(&self) -> usize {
        self.files.len()
    }
}

#[cfg(test)]
mod tests {
    use datafusion_datasource::FileRange;

    use super::*;

    #[test]
    fn units_are_known_by_object_and_range_and_the_first_listing_wins() {
        let whole = PartitionedFile::new("a.parquet", 100);
        let mut first_half = PartitionedFile::new("a.parquet", 100);
        first_half.range = Some(FileRange { start: 0, end: 50 });
        let other = PartitionedFile::new("b.parquet", 100);
        let units = ScanUnits::new(
            "s3://bucket/",
            vec![whole.clone(), first_half.clone(), whole.clone()],
        );
        assert_eq!(units.id(&whole), Some(0));
        assert_eq!(units.id(&first_half), Some(1));
        assert_eq!(units.id(&other), None);
        assert_eq!(units.len(), 3);
    }

    #[test]
    fn files_are_named_as_the_user_gave_them() {
        let file = PartitionedFile::new("data/a.parquet", 100);
        let remote = ScanUnits::new("s3://bucket/", vec![file.clone()]);
        assert_eq!(remote.display(0), "s3://bucket/data/a.parquet");
        let local = ScanUnits::new("file:///", vec![file]);
        assert_eq!(local.display(0), "/data/a.parquet");
    }
}
