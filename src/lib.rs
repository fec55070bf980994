//! BCL placeholder
