//! Loom models (placeholder).
