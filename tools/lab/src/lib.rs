//! bcl-lab (being written)
