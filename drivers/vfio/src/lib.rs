//! bcl-vfio (being written)
