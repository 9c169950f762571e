//! Replicated DSAs: read-your-writes from replication positions, a
//! multi-provider pair, post-read.

mod post_read;
mod read_your_writes;
mod replication_pair;
