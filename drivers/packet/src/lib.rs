//! bcl-packet (being written)
