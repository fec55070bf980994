//! bcl-afxdp (being written)
