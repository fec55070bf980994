//! bcl-shm (being written)
