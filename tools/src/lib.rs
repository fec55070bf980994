//! bcl-tools
