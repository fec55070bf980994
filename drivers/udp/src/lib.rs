//! bcl-udp (being written)
