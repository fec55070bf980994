//! bcl-sim
