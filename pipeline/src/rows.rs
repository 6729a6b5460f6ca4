//! Former path of the cell codec, kept so that files being edited elsewhere still build.
//!
//! Re-exports only: new code uses [`crate::codec`]. Remove once no `rows::` path is left.

pub use crate::codec::hourly::{points_from_wide, wide_put};
pub use crate::codec::narrow::{narrow_put, reading_from_narrow, EXTRA_QUALIFIER, VALUE_QUALIFIER};
