//! bcl-vfio-cli (being written)
