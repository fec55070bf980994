//! Bare Ethernet frames on the packet method's socket and rings, with no
//! BCL protocol: the floor that BCL over AF_PACKET is measured against (the
//! tools' `packet-raw`).
//!
//! The socket is opened exactly as the method opens it (the same options,
//! ring geometry and EtherType filter), so the difference between the two
//! is BCL's own work: the core, the receive filter and the frame headers.

use crate::method::{open_socket, PacketConfig, METHOD_NAME};
use crate::sys::{
    wait_readable, PacketSocket, TP_STATUS_AVAILABLE, TP_STATUS_KERNEL, TP_STATUS_SEND_REQUEST,
    TP_STATUS_USER,
};
use bcl_core::MethodError;
use bcl_ether::Interface;
use std::io;
use std::os::fd::RawFd;

/// An AF_PACKET socket with the method's rings, moving whole Ethernet
/// frames.
pub struct RawPacket {
    sock: PacketSocket,
    iface: Interface,
    mtu: usize,
}

impl std::fmt::Debug for RawPacket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RawPacket")
            .field("interface", &self.iface.name)
            .field("mtu", &self.mtu)
            .finish()
    }
}

impl RawPacket {
    /// Opens the socket on `cfg`'s interface for frames of its EtherType.
    pub fn open(cfg: &PacketConfig) -> Result<RawPacket, MethodError> {
        let (sock, iface, mtu) = open_socket(cfg)?;
        Ok(RawPacket { sock, iface, mtu })
    }

    /// The interface in use.
    pub fn interface(&self) -> &Interface {
        &self.iface
    }

    /// The interface's MTU: the largest frame after its Ethernet header.
    pub fn mtu(&self) -> usize {
        self.mtu
    }

    /// Writes one frame into the next free transmit slot: `fill` gets room
    /// for an Ethernet header plus [`RawPacket::mtu`] bytes and returns the
    /// frame's length. Returns false, without calling `fill`, while the
    /// kernel still holds that slot (the ring is full). The frame leaves at
    /// the next [`RawPacket::kick`].
    pub fn queue(&mut self, fill: impl FnOnce(&mut [u8]) -> usize) -> Result<bool, MethodError> {
        let room = bcl_ether::HEADER_LEN + self.mtu;
        let ring = &mut self.sock.tx;
        let i = ring.head;
        if ring.load_status(i) != TP_STATUS_AVAILABLE {
            return Ok(false);
        }
        let data = ring.tx_data(i);
        let room = room.min(data.len());
        let len = fill(&mut data[..room]);
        if len > room {
            return Err(MethodError::Other {
                method: METHOD_NAME,
                reason: format!("a frame of {len} bytes exceeds the {room} bytes of a ring slot"),
            });
        }
        ring.set_tx_len(i, len);
        ring.store_status(i, TP_STATUS_SEND_REQUEST);
        ring.head = (i + 1) % ring.frames;
        Ok(true)
    }

    /// Asks the kernel to send the queued frames, without waiting.
    pub fn kick(&self) -> io::Result<()> {
        self.sock.kick()
    }

    /// Shows up to `budget` received frames (from the Ethernet header on) to
    /// `f`, in order, and gives their slots back; returns how many were
    /// taken. Frames the ring cut short are taken but not shown.
    pub fn recv(&mut self, budget: usize, mut f: impl FnMut(&[u8])) -> usize {
        let ring = &mut self.sock.rx;
        let mut taken = 0;
        while taken < budget {
            let i = ring.head;
            if ring.load_status(i) & TP_STATUS_USER == 0 {
                break;
            }
            if let Some((bytes, false)) = ring.rx_frame(i) {
                f(bytes);
            }
            ring.store_status(i, TP_STATUS_KERNEL);
            ring.head = (i + 1) % ring.frames;
            taken += 1;
        }
        taken
    }

    /// The socket, for waiting in poll/epoll until a frame arrives.
    pub fn fd(&self) -> RawFd {
        self.sock.fd()
    }

    /// Waits up to `timeout_ms` for a received frame; whether one came.
    pub fn wait_readable(&self, timeout_ms: i32) -> io::Result<bool> {
        wait_readable(self.sock.fd(), timeout_ms)
    }
}
