-- Wireshark dissector for BCL, the userspace cluster communication stack.
--
-- Install (Wireshark and tshark load it at start):
--   mkdir -p ~/.local/lib/wireshark/plugins && cp tools/wireshark/bcl.lua ~/.local/lib/wireshark/plugins/
-- or use it once without installing:
--   tshark -X lua_script:tools/wireshark/bcl.lua -r run.pcapng -O bcl
--
-- What it reads:
--   * BCL_PCAP captures (link type LINKTYPE_USER5 = 152, DLT_USER5): a
--     48-byte pseudo-header (method, direction, local and peer process,
--     link, kind), then a BCL frame, a direct message (shared memory's whole
--     messages, no BCL header; kind 5 a service message), a bulk
--     transfer's data, or a congestion
--     state (kind 4: a change of the congestion window to one peer, on the
--     interface NODE.PORT/cc, direction 0). The layout is documented in
--     src/capture/mod.rs; the constants below must agree.
--   * Ethernet II frames of EtherType 0x88B5 and 0x88B6 (tcpdump or tshark
--     on a veth or NIC under the packet, afxdp and vfio methods).
--   * UDP datagrams that look like BCL frames (heuristic; the udp method's
--     ports are chosen by the kernel), or any UDP port by Decode As.
--
-- Protocol filter name: bcl. Fields: bcl.* (header), bcl.flags.*,
-- bcl.bundle.* (a bundle's messages), bcl.sack.* and bcl.nak.* (ACK and
-- NAK bodies), bcl.rndv.*, bcl.rma.*, bcl.ctl.* (control bodies),
-- bcl.cap.* (the capture pseudo-header), bcl.direct.*, bcl.bulk.*,
-- bcl.cc.* (congestion state), bcl.analysis.* (sequence analysis).
--
-- Sequence analysis runs per flow: one capture point (the pcap-ng
-- interface: one endpoint's method in a BCL_PCAP capture, one NIC in a
-- tcpdump capture), one sender, one receiver, one sender incarnation and
-- stream generation; the dissector keeps a table per flow, filled on the
-- first pass and kept per frame (the Lua API of Wireshark 4.0 has no
-- conversation objects, so the flows are keyed here as a conversation
-- would be). For sequenced DATA
-- frames (not UNSEQUENCED ones, which shared memory sends and nobody
-- numbers):
--   bcl.analysis.retransmission  the sequence number was seen before in
--                                the flow and is not yet acknowledged at
--                                this capture point: a resend (on timeout
--                                or NAK) that the receiver may still need
--   bcl.analysis.duplicate       seen before, and already acknowledged at
--                                this capture point (the receiver's
--                                cumulative ack, on an ACK, NAK or a
--                                piggybacked ack, is past it): a copy the
--                                receiver has and drops (a spurious resend,
--                                or a copy the network made)
--   bcl.analysis.out_of_order    not seen before, and below the highest
--                                sequence number seen in the flow
--   bcl.analysis.gap             frames missing before this one (above the
--                                highest seen + 1): lost or not captured
--   bcl.analysis.first_frame     the frame where this sequence number was
--                                first seen (for the two above)
-- and for ACK frames, bcl.analysis.duplicate_ack: the same cumulative ack
-- and selective bitmap as the flow's previous ACK.

local bcl = Proto("bcl", "BCL cluster communication")

-- The capture's link type (src/capture/mod.rs: LINKTYPE_BCL = 152 =
-- LINKTYPE_USER5) and pseudo-header length.
local WTAP_ENCAP_BCL = wtap_encaps.USER5
local PSEUDO_HEADER_LEN = 48
local CC_BODY_LEN = 32
local HEADER_LEN = 64
local ETHERTYPES = { 0x88B5, 0x88B6 }

-- Bit operations that work on Lua 5.2's bit32 and on LuaBitOp ("bit",
-- signed results), both shipped by Wireshark.
local B = bit32 or bit
local TWO32 = 4294967296
local function u32(x) return x % TWO32 end
local function band(a, b) return u32(B.band(a, b)) end
local function bxor(a, b) return u32(B.bxor(a, b)) end
local function rshift(a, n) return u32(B.rshift(a, n)) end

------------------------------------------------------------------------
-- Value names

local frame_types = {
    [1] = "DATA", [2] = "ACK", [3] = "NAK", [4] = "RNDV_REQUEST", [5] = "RNDV_READY",
    [6] = "RMA_PUT", [7] = "RMA_GET", [8] = "RMA_GET_REPLY", [9] = "CONTROL", [10] = "SERVICE",
    [11] = "CONTAINER",  -- whole frames of several senders, daemon to daemon
}
local cap_kinds = {
    [1] = "BCL frame", [2] = "direct message", [3] = "bulk transfer", [4] = "congestion state",
    [5] = "direct service message",
}
-- The service messages' own header (src/service/wire.rs): kind, 3 zero
-- bytes, handler id and request id (little-endian).
local service_kinds = {
    [1] = "request", [2] = "reply", [3] = "error", [4] = "large request", [5] = "large reply",
    [6] = "clear request", [7] = "clear reply",
}
local directions = { [0] = "none (state record)", [1] = "received", [2] = "sent" }
local cc_causes = { [1] = "increase", [2] = "delay decrease", [3] = "loss", [4] = "timeout", [5] = "undo", [6] = "echo" }
local bulk_kinds = { [0] = "none", [1] = "normal channel", [2] = "RMA put", [3] = "RMA get reply" }
local nak_reasons = { [0] = "none (ACK)", [1] = "gap", [2] = "receive ring full" }
local statuses = {
    [0] = "OK", [1] = "buffer too small", [2] = "no channel", [3] = "cancelled",
    [4] = "bad key", [5] = "out of bounds", [6] = "unregistered",
}
local control_codes = { [1] = "put result", [2] = "get result", [3] = "cancel" }
local crc_status_names = { [0] = "Bad", [1] = "Good", [2] = "Unverified", [3] = "Not present" }

local FLAG_ACK, FLAG_CRC, FLAG_ACK_FRESH, FLAG_UNSEQUENCED, FLAG_BUNDLE, FLAG_PING = 0x1, 0x2, 0x4, 0x8, 0x10, 0x20
local FLAG_NODE = 0x40
local FLAG_CONGESTED = 0x80
local BIT = { 1, 2, 4, 8, 16, 32, 64, 128 }
local FLAGS_KNOWN = 0xFF
-- An ACK body's length (a node's live ports follow it with FLAG_NODE).
local ACK_BODY_LEN = 40

------------------------------------------------------------------------
-- Fields

local f = {}
-- capture pseudo-header
f.cap = ProtoField.none("bcl.cap", "Capture pseudo-header")
f.cap_version = ProtoField.uint8("bcl.cap.version", "Pseudo-header version")
f.cap_kind = ProtoField.uint8("bcl.cap.kind", "Kind", base.DEC, cap_kinds)
f.cap_direction = ProtoField.uint8("bcl.cap.direction", "Direction", base.DEC, directions)
f.cap_header_len = ProtoField.uint8("bcl.cap.header_len", "Pseudo-header length")
f.cap_method = ProtoField.string("bcl.cap.method", "Method")
f.cap_local = ProtoField.string("bcl.cap.local", "Local process")
f.cap_local_node = ProtoField.uint32("bcl.cap.local.node", "Local node")
f.cap_local_port = ProtoField.uint16("bcl.cap.local.port", "Local port")
f.cap_peer = ProtoField.string("bcl.cap.peer", "Peer process")
f.cap_peer_port = ProtoField.uint16("bcl.cap.peer.port", "Peer port")
f.cap_peer_node = ProtoField.uint32("bcl.cap.peer.node", "Peer node")
f.cap_link = ProtoField.uint32("bcl.cap.link", "Link")
f.cap_bulk_kind = ProtoField.uint8("bcl.cap.bulk_kind", "Bulk kind", base.DEC, bulk_kinds)
f.cap_channel = ProtoField.uint16("bcl.cap.channel", "Channel")
f.cap_transfer = ProtoField.uint32("bcl.cap.transfer", "Transfer id")
f.cap_pid = ProtoField.uint32("bcl.cap.pid", "Process id")
f.cap_total_len = ProtoField.uint64("bcl.cap.total_len", "Whole length")
f.direct_len = ProtoField.uint32("bcl.direct.len", "Direct message length")
f.direct_data = ProtoField.bytes("bcl.direct.data", "Direct message")
f.bulk_data = ProtoField.bytes("bcl.bulk.data", "Transfer data")
-- service messages (remote service requests and their answers)
f.svc_kind = ProtoField.uint8("bcl.svc.kind", "Service message", base.DEC, service_kinds)
f.svc_handler = ProtoField.uint32("bcl.svc.handler", "Handler id")
f.svc_request = ProtoField.uint32("bcl.svc.request", "Request id")
f.svc_len = ProtoField.uint64("bcl.svc.len", "Large payload length")
f.svc_channel = ProtoField.uint16("bcl.svc.channel", "Channel posted (65535: refused)")
f.svc_body = ProtoField.bytes("bcl.svc.body", "Payload")
-- congestion state (kind 4); nanosecond fields are raw values, all ones
-- meaning unknown
f.cc_cause = ProtoField.uint8("bcl.cc.cause", "Cause", base.DEC, cc_causes)
f.cc_flags = ProtoField.uint8("bcl.cc.flags", "Flags", base.HEX)
f.cc_slow_start = ProtoField.bool("bcl.cc.slow_start", "Slow start", 8, nil, 0x01)
f.cc_window = ProtoField.uint32("bcl.cc.window", "Window (whole frames)")
f.cc_base_rtt = ProtoField.uint32("bcl.cc.base_rtt", "Base round trip (ns)")
f.cc_qdelay = ProtoField.uint32("bcl.cc.qdelay", "Queueing delay (ns)")
f.cc_srtt = ProtoField.uint32("bcl.cc.srtt", "Smoothed round trip (ns)")
f.cc_in_flight = ProtoField.uint32("bcl.cc.in_flight", "Frames in flight")
f.cc_pacing_rate = ProtoField.uint64("bcl.cc.pacing_rate", "Pacing rate (bytes/s)")
-- header
f.version = ProtoField.uint8("bcl.version", "Version")
f.type = ProtoField.uint8("bcl.type", "Type", base.DEC, frame_types)
f.generation = ProtoField.uint8("bcl.generation", "Stream generation", base.DEC)
f.flags = ProtoField.uint8("bcl.flags", "Flags", base.HEX)
f.flag_ack = ProtoField.bool("bcl.flags.ack", "ACK (cumulative ack valid)", 8, nil, FLAG_ACK)
f.flag_crc = ProtoField.bool("bcl.flags.crc", "CRC (CRC32C present)", 8, nil, FLAG_CRC)
f.flag_ack_fresh = ProtoField.bool("bcl.flags.ack_fresh", "ACK_FRESH (ack sent for the first time)", 8, nil, FLAG_ACK_FRESH)
f.flag_unsequenced = ProtoField.bool("bcl.flags.unsequenced", "UNSEQUENCED (reliable method, no sequence number)", 8, nil, FLAG_UNSEQUENCED)
f.flag_bundle = ProtoField.bool("bcl.flags.bundle", "BUNDLE (payload is several messages)", 8, nil, FLAG_BUNDLE)
f.flag_ping = ProtoField.bool("bcl.flags.ping", "PING (liveness: answer with an ACK at once)", 8, nil, FLAG_PING)
f.flag_node = ProtoField.bool("bcl.flags.node", "NODE (the sender node's live ports follow the ack body)", 8, nil, FLAG_NODE)
f.flag_congested = ProtoField.bool("bcl.flags.congested", "CONGESTED (frames went missing on their way to the sender lately)", 8, nil, FLAG_CONGESTED)
f.flag_unknown = ProtoField.uint8("bcl.flags.unknown", "Unknown flag bits", base.HEX, nil, 0x80)
-- a node's live ports (after an ACK body, FLAG_NODE)
f.node_live = ProtoField.bytes("bcl.node.live", "Sender node's live ports (bitmap, ports 0-127)")
f.node_ports = ProtoField.string("bcl.node.ports", "Live ports")
f.job = ProtoField.uint32("bcl.job", "Job key", base.HEX)
f.src = ProtoField.string("bcl.src", "Source")
f.src_node = ProtoField.uint32("bcl.src.node", "Source node")
f.src_port = ProtoField.uint16("bcl.src.port", "Source port")
f.dst = ProtoField.string("bcl.dst", "Destination")
f.dst_port = ProtoField.uint16("bcl.dst.port", "Destination port")
f.dst_node = ProtoField.uint32("bcl.dst.node", "Destination node")
f.epoch = ProtoField.uint32("bcl.epoch", "Source incarnation", base.HEX)
f.seq = ProtoField.uint32("bcl.seq", "Sequence number")
f.ack = ProtoField.uint32("bcl.ack", "Cumulative ack (next wanted)")
f.window = ProtoField.uint32("bcl.window", "Window base (oldest unacknowledged)")
f.channel = ProtoField.uint16("bcl.channel", "Channel")
f.payload_len = ProtoField.uint16("bcl.payload_len", "Payload length")
f.msg_id = ProtoField.uint32("bcl.msg_id", "Message id")
f.msg_seq = ProtoField.uint32("bcl.msg_seq", "Sequence number of the message's first frame")
f.offset = ProtoField.uint64("bcl.offset", "Fragment offset")
f.msg_len = ProtoField.uint32("bcl.msg_len", "Message length")
f.crc = ProtoField.uint32("bcl.crc", "CRC32C", base.HEX)
f.crc_status = ProtoField.uint8("bcl.crc.status", "CRC32C status", base.DEC, crc_status_names)
f.crc_calculated = ProtoField.uint32("bcl.crc.calculated", "Calculated CRC32C", base.HEX)
f.payload = ProtoField.bytes("bcl.payload", "Payload")
f.padding = ProtoField.bytes("bcl.padding", "Bytes after the payload")
-- bundles
f.bundle_count = ProtoField.uint16("bcl.bundle.count", "Messages in bundle")
f.bundle_msg = ProtoField.none("bcl.bundle.msg", "Bundled message")
f.bundle_msg_id = ProtoField.uint32("bcl.bundle.msg_id", "Message id")
f.bundle_msg_len = ProtoField.uint16("bcl.bundle.msg_len", "Length")
f.bundle_data = ProtoField.bytes("bcl.bundle.data", "Message")
-- ACK and NAK bodies
f.nak_reason = ProtoField.uint8("bcl.nak.reason", "Reason", base.DEC, nak_reasons)
f.sack_duplicates = ProtoField.uint8("bcl.sack.duplicates", "Duplicates received since the previous ACK")
f.sack_bits = ProtoField.uint16("bcl.sack.bits", "Selective ack bits used")
f.nak_dropped_seq = ProtoField.uint32("bcl.nak.dropped_seq", "Dropped sequence number")
f.sack_bitmap = ProtoField.bytes("bcl.sack.bitmap", "Selective ack bitmap")
f.sack_count = ProtoField.uint16("bcl.sack.count", "Frames received past the cumulative ack")
f.sack_ranges = ProtoField.string("bcl.sack.ranges", "Received past the cumulative ack")
f.sack_seq = ProtoField.uint32("bcl.sack.seq", "Received sequence number")
-- control bodies
f.rndv_channel = ProtoField.uint16("bcl.rndv.channel", "Channel")
f.rndv_transfer = ProtoField.uint32("bcl.rndv.transfer", "Transfer id")
f.rndv_len = ProtoField.uint64("bcl.rndv.len", "Length")
f.rndv_status = ProtoField.uint8("bcl.rndv.status", "Status", base.DEC, statuses)
f.rndv_capacity = ProtoField.uint64("bcl.rndv.capacity", "Posted buffer")
f.rma_channel = ProtoField.uint16("bcl.rma.channel", "Open channel")
f.rma_inline = ProtoField.uint8("bcl.rma.inline", "Inline data")
f.rma_transfer = ProtoField.uint32("bcl.rma.transfer", "Transfer id")
f.rma_key = ProtoField.uint64("bcl.rma.key", "Key", base.HEX)
f.rma_offset = ProtoField.uint64("bcl.rma.offset", "Offset")
f.rma_len = ProtoField.uint64("bcl.rma.len", "Length")
f.ctl_code = ProtoField.uint8("bcl.ctl.code", "Code", base.DEC, control_codes)
f.ctl_status = ProtoField.uint8("bcl.ctl.status", "Status", base.DEC, statuses)
f.ctl_channel = ProtoField.uint16("bcl.ctl.channel", "Channel")
f.ctl_transfer = ProtoField.uint32("bcl.ctl.transfer", "Transfer id")
f.ctl_detail = ProtoField.uint64("bcl.ctl.detail", "Detail")
-- sequence analysis
f.analysis = ProtoField.none("bcl.analysis", "SEQ/ACK analysis")
f.an_retrans = ProtoField.none("bcl.analysis.retransmission", "Retransmission")
f.an_dup = ProtoField.none("bcl.analysis.duplicate", "Duplicate")
f.an_ooo = ProtoField.none("bcl.analysis.out_of_order", "Out of order")
f.an_gap = ProtoField.uint32("bcl.analysis.gap", "Frames not seen before this one")
f.an_first = ProtoField.framenum("bcl.analysis.first_frame", "First seen in frame", base.NONE, frametype.RETRANS_PREV)
f.an_dupack = ProtoField.none("bcl.analysis.duplicate_ack", "Duplicate ACK")
f.an_dupack_of = ProtoField.framenum("bcl.analysis.duplicate_ack_of", "Same ACK as in frame", base.NONE, frametype.DUP_ACK)

local field_list = {}
for _, v in pairs(f) do field_list[#field_list + 1] = v end
bcl.fields = field_list

local e = {
    bad_crc = ProtoExpert.new("bcl.crc.bad", "CRC32C mismatch", expert.group.CHECKSUM, expert.severity.ERROR),
    truncated = ProtoExpert.new("bcl.truncated", "Frame shorter than its header or payload", expert.group.MALFORMED, expert.severity.ERROR),
    bad_version = ProtoExpert.new("bcl.version.unknown", "Unknown wire-format version", expert.group.MALFORMED, expert.severity.WARN),
    bad_bundle = ProtoExpert.new("bcl.bundle.bad", "Malformed bundle", expert.group.MALFORMED, expert.severity.ERROR),
    bad_body = ProtoExpert.new("bcl.body.bad", "Body too short for its frame type", expert.group.MALFORMED, expert.severity.WARN),
    retrans = ProtoExpert.new("bcl.analysis.retransmission.expert", "Retransmission", expert.group.SEQUENCE, expert.severity.NOTE),
    dup = ProtoExpert.new("bcl.analysis.duplicate.expert", "Duplicate frame", expert.group.SEQUENCE, expert.severity.NOTE),
    ooo = ProtoExpert.new("bcl.analysis.out_of_order.expert", "Out-of-order frame", expert.group.SEQUENCE, expert.severity.WARN),
    gap = ProtoExpert.new("bcl.analysis.gap.expert", "Frames missing before this one (lost or not captured)", expert.group.SEQUENCE, expert.severity.WARN),
    dupack = ProtoExpert.new("bcl.analysis.duplicate_ack.expert", "Duplicate ACK", expert.group.SEQUENCE, expert.severity.NOTE),
    nak = ProtoExpert.new("bcl.nak.expert", "NAK", expert.group.SEQUENCE, expert.severity.NOTE),
}
bcl.experts = { e.bad_crc, e.truncated, e.bad_version, e.bad_bundle, e.bad_body, e.retrans, e.dup, e.ooo, e.gap, e.dupack, e.nak }

local interface_id = Field.new("frame.interface_id")

------------------------------------------------------------------------
-- CRC32C (Castagnoli, reflected polynomial 0x82F63B78), as the wire
-- format's crc32c crate computes it over the header before the CRC field
-- and then the payload.

local CRC_TABLE = {}
for i = 0, 255 do
    local c = i
    for _ = 1, 8 do
        if band(c, 1) == 1 then c = bxor(rshift(c, 1), 0x82F63B78) else c = rshift(c, 1) end
    end
    CRC_TABLE[i] = c
end

local function crc32c_update(crc, s)
    local byte = string.byte
    for i = 1, #s do
        crc = bxor(rshift(crc, 8), CRC_TABLE[band(bxor(crc, byte(s, i)), 0xFF)])
    end
    return crc
end

------------------------------------------------------------------------
-- Sequence analysis state (see the header comment)

local flows = {}      -- flow key -> { max = seq, seen = { [seq] = frame }, count }
local acked = {}      -- capture point|data sender>data receiver -> cumulative ack seen
local ack_flows = {}  -- flow key -> { ack, bitmap, frame }
local results = {}    -- frame number -> analysis of that frame

function bcl.init()
    flows, acked, ack_flows, results = {}, {}, {}, {}
end

-- a before b in wrap-safe 32-bit sequence arithmetic
local function seq_before(a, b)
    local d = u32(b - a)
    return d ~= 0 and d < 2147483648
end

local function analyse_data(key, ack_key, seq, number)
    local flow = flows[key]
    local r = {}
    if not flow then
        flow = { max = seq, seen = {}, count = 0 }
        flows[key] = flow
        flow.seen[seq] = number
        return r
    end
    local first = flow.seen[seq]
    if first then
        r.first = first
        local cum = acked[ack_key]
        if cum and seq_before(seq, cum) then r.dup = true else r.retrans = true end
        return r
    end
    flow.seen[seq] = number
    flow.count = flow.count + 1
    if seq_before(seq, flow.max) then
        r.ooo = true
    else
        local missing = u32(seq - flow.max) - 1
        if missing > 0 then r.gap = missing end
        flow.max = seq
    end
    -- Forget sequence numbers far behind the highest, so that memory stays
    -- bounded on long captures.
    if flow.count >= 65536 then
        local keep = {}
        for s, v in pairs(flow.seen) do
            if u32(flow.max - s) < 65536 then keep[s] = v end
        end
        flow.seen, flow.count = keep, 0
    end
    return r
end

------------------------------------------------------------------------
-- The BCL frame

local function addr_text(node, port) return string.format("%d.%d", node, port) end

local function add_sack(tree, tvb, ack, bits)
    local received, ranges = 0, {}
    local run_start, run_end = nil, nil
    local sack_tree = tree
    for i = 0, bits - 1 do
        local byte = tvb(8 + math.floor(i / 8), 1):uint()
        if band(rshift(byte, i % 8), 1) == 1 then
            local s = u32(ack + 1 + i)
            received = received + 1
            -- One filterable item per sequence number, not shown (the
            -- ranges below say the same in one line).
            sack_tree:add(f.sack_seq, s):set_generated():set_hidden()
            if run_end and u32(run_end + 1) == s then
                run_end = s
            else
                if run_start then ranges[#ranges + 1] = run_start == run_end and tostring(run_start) or (run_start .. "-" .. run_end) end
                run_start, run_end = s, s
            end
        end
    end
    if run_start then ranges[#ranges + 1] = run_start == run_end and tostring(run_start) or (run_start .. "-" .. run_end) end
    tree:add(f.sack_count, received):set_generated()
    tree:add(f.sack_ranges, #ranges > 0 and table.concat(ranges, ", ") or "none"):set_generated()
    return received, ranges
end

-- Dissects a BCL frame (header first) in `tvb`; `ctx` says where it came
-- from: { capture_point = string }. Returns the bytes
-- used and a summary for the Info column.
-- A service message's header and body (a whole message, or the first
-- fragment of one); returns the info text.
local function dissect_service(buf, tree)
    if buf:len() < 12 then
        tree:add_proto_expert_info(e.bad_body)
        return " service (short)"
    end
    local kind = buf(0, 1):uint()
    tree:add(f.svc_kind, buf(0, 1))
    tree:add_le(f.svc_handler, buf(4, 4))
    tree:add_le(f.svc_request, buf(8, 4))
    local info = string.format(" %s handler=%d request=%d", service_kinds[kind] or "service?",
        buf(4, 4):le_uint(), buf(8, 4):le_uint())
    if (kind == 4 or kind == 5) and buf:len() >= 20 then
        tree:add_le(f.svc_len, buf(12, 8))
        info = info .. string.format(" len=%s", tostring(buf(12, 8):le_uint64()))
    elseif (kind == 6 or kind == 7) and buf:len() >= 14 then
        tree:add_le(f.svc_channel, buf(12, 2))
        info = info .. string.format(" ch=%d", buf(12, 2):le_uint())
    elseif buf:len() > 12 then
        tree:add(f.svc_body, buf(12))
    end
    return info
end

local function dissect_frame(tvb, pinfo, tree, ctx)
    local len = tvb:len()
    if len < HEADER_LEN then
        tree:add_proto_expert_info(e.truncated)
        return len, "truncated BCL frame"
    end
    local version = tvb(0, 1):uint()
    local ftype = tvb(1, 1):uint()
    local generation = tvb(2, 1):uint()
    local flags = tvb(3, 1):uint()
    local src_node, src_port = tvb(8, 4):uint(), tvb(12, 2):uint()
    local dst_port, dst_node = tvb(14, 2):uint(), tvb(16, 4):uint()
    local epoch, seq, ack = tvb(20, 4):uint(), tvb(24, 4):uint(), tvb(28, 4):uint()
    local channel, payload_len = tvb(36, 2):uint(), tvb(38, 2):uint()
    local msg_id = tvb(40, 4):uint()
    local src, dst = addr_text(src_node, src_port), addr_text(dst_node, dst_port)
    local tname = frame_types[ftype] or string.format("type %d", ftype)

    local vi = tree:add(f.version, tvb(0, 1))
    if version ~= 1 then vi:add_proto_expert_info(e.bad_version) end
    tree:add(f.type, tvb(1, 1))
    local names = {}
    if band(flags, FLAG_ACK) ~= 0 then names[#names + 1] = "ACK" end
    if band(flags, FLAG_CRC) ~= 0 then names[#names + 1] = "CRC" end
    if band(flags, FLAG_ACK_FRESH) ~= 0 then names[#names + 1] = "ACK_FRESH" end
    if band(flags, FLAG_UNSEQUENCED) ~= 0 then names[#names + 1] = "UNSEQUENCED" end
    if band(flags, FLAG_BUNDLE) ~= 0 then names[#names + 1] = "BUNDLE" end
    if band(flags, FLAG_PING) ~= 0 then names[#names + 1] = "PING" end
    if band(flags, FLAG_NODE) ~= 0 then names[#names + 1] = "NODE" end
    if band(flags, FLAG_CONGESTED) ~= 0 then names[#names + 1] = "CONGESTED" end
    tree:add(f.generation, tvb(2, 1))
    local ft = tree:add(f.flags, tvb(3, 1))
    ft:append_text(" (" .. (#names > 0 and table.concat(names, ", ") or "none") .. ")")
    ft:add(f.flag_ack, tvb(3, 1))
    ft:add(f.flag_crc, tvb(3, 1))
    ft:add(f.flag_ack_fresh, tvb(3, 1))
    ft:add(f.flag_unsequenced, tvb(3, 1))
    ft:add(f.flag_bundle, tvb(3, 1))
    ft:add(f.flag_ping, tvb(3, 1))
    ft:add(f.flag_node, tvb(3, 1))
    ft:add(f.flag_congested, tvb(3, 1))
    if band(flags, 0xFF - FLAGS_KNOWN) ~= 0 then ft:add(f.flag_unknown, tvb(3, 1)) end
    tree:add(f.job, tvb(4, 4))
    local st = tree:add(f.src, tvb(8, 6), src)
    st:add(f.src_node, tvb(8, 4))
    st:add(f.src_port, tvb(12, 2))
    local dt = tree:add(f.dst, tvb(14, 6), dst)
    dt:add(f.dst_port, tvb(14, 2))
    dt:add(f.dst_node, tvb(16, 4))
    tree:add(f.epoch, tvb(20, 4))
    tree:add(f.seq, tvb(24, 4))
    tree:add(f.ack, tvb(28, 4))
    tree:add(f.window, tvb(32, 4))
    tree:add(f.channel, tvb(36, 2))
    tree:add(f.payload_len, tvb(38, 2))
    tree:add(f.msg_id, tvb(40, 4))
    tree:add(f.msg_seq, tvb(44, 4))
    tree:add(f.offset, tvb(48, 8))
    tree:add(f.msg_len, tvb(56, 4))

    local have = len - HEADER_LEN
    local complete = payload_len <= have
    local ct = tree:add(f.crc, tvb(60, 4))
    if band(flags, FLAG_CRC) == 0 then
        ct:append_text(" [not present]")
        ct:add(f.crc_status, 3):set_generated()
    elseif not complete then
        ct:append_text(" [unverified: frame cut short]")
        ct:add(f.crc_status, 2):set_generated()
    else
        local crc = crc32c_update(0xFFFFFFFF, tvb:raw(0, 60))
        if payload_len > 0 then crc = crc32c_update(crc, tvb:raw(HEADER_LEN, payload_len)) end
        crc = bxor(crc, 0xFFFFFFFF)
        ct:add(f.crc_calculated, crc):set_generated()
        if crc == tvb(60, 4):uint() then
            ct:append_text(" [correct]")
            ct:add(f.crc_status, 1):set_generated()
        else
            ct:append_text(string.format(" [incorrect, should be 0x%08x]", crc))
            ct:add(f.crc_status, 0):set_generated()
            ct:add_proto_expert_info(e.bad_crc)
        end
    end
    if not complete then
        tree:add_proto_expert_info(e.truncated)
        payload_len = have
    end

    local info = string.format("%s %s → %s", tname, src, dst)
    local sequenced = band(flags, FLAG_UNSEQUENCED) == 0
    if ftype == 1 and sequenced then info = info .. string.format(" seq=%d", seq) end
    if band(flags, FLAG_ACK) ~= 0 then info = info .. string.format(" ack=%d", ack) end

    local payload = tvb(HEADER_LEN, payload_len)
    if ftype == 1 and band(flags, FLAG_BUNDLE) ~= 0 and payload_len >= 2 then
        local count = payload(0, 2):uint()
        local bt = tree:add(f.bundle_count, payload(0, 2))
        local at = 2
        local ok = true
        for i = 0, count - 1 do
            if at + 2 > payload_len then ok = false break end
            local mlen = payload(at, 2):uint()
            if at + 2 + mlen > payload_len then ok = false break end
            local mt = bt:add(f.bundle_msg, payload(at, 2 + mlen))
            mt:set_text(string.format("Message %d: %d bytes", u32(msg_id + i), mlen))
            mt:add(f.bundle_msg_id, u32(msg_id + i)):set_generated()
            mt:add(f.bundle_msg_len, payload(at, 2))
            if mlen > 0 then mt:add(f.bundle_data, payload(at + 2, mlen)) end
            at = at + 2 + mlen
        end
        if not ok or at ~= payload_len then bt:add_proto_expert_info(e.bad_bundle) end
        info = info .. string.format(" bundle of %d (msgs %d-%d)", count, msg_id, u32(msg_id + count - 1))
    elseif ftype == 2 or ftype == 3 then
        if payload_len >= 8 then
            local reason = payload(0, 1):uint()
            local bits = payload(2, 2):uint()
            local rt = tree:add(f.nak_reason, payload(0, 1))
            if ftype == 3 then rt:add_proto_expert_info(e.nak, "NAK: " .. (nak_reasons[reason] or "unknown reason")) end
            tree:add(f.sack_duplicates, payload(1, 1))
            tree:add(f.sack_bits, payload(2, 2))
            tree:add(f.nak_dropped_seq, payload(4, 4))
            local avail = math.min(payload_len - 8, 32)
            if bits > avail * 8 then bits = avail * 8 end
            if avail > 0 then
                local bm = tree:add(f.sack_bitmap, payload(8, avail))
                local n, ranges = add_sack(bm, payload, ack, bits)
                if n > 0 then info = info .. " sack=" .. table.concat(ranges, ",") end
            end
            if ftype == 3 then
                info = info .. " reason=" .. (nak_reasons[reason] or tostring(reason))
                if reason == 2 then info = info .. string.format(" dropped=%d", payload(4, 4):uint()) end
            end
            if ftype == 2 and band(flags, FLAG_NODE) ~= 0 then
                if payload_len >= ACK_BODY_LEN + 16 then
                    local nt = tree:add(f.node_live, payload(ACK_BODY_LEN, 16))
                    local ports = {}
                    for i = 0, 127 do
                        local byte = payload(ACK_BODY_LEN + math.floor(i / 8), 1):uint()
                        if band(byte, BIT[i % 8 + 1]) ~= 0 then ports[#ports + 1] = tostring(i) end
                    end
                    nt:add(f.node_ports, table.concat(ports, ","))
                    info = info .. " node-live=" .. (#ports > 0 and table.concat(ports, ",") or "none")
                else
                    tree:add_proto_expert_info(e.bad_body)
                end
            end
        else
            tree:add_proto_expert_info(e.bad_body)
        end
    elseif ftype == 10 and tvb(48, 8):uint64() == UInt64(0) and payload_len > 0 then
        info = info .. dissect_service(payload, tree)
    elseif ftype >= 4 and ftype <= 9 and tvb(48, 8):uint64() == UInt64(0) then
        -- A control message's body starts its first fragment.
        if ftype == 4 and payload_len >= 16 then
            tree:add(f.rndv_channel, payload(0, 2))
            tree:add(f.rndv_transfer, payload(4, 4))
            tree:add(f.rndv_len, payload(8, 8))
            info = info .. string.format(" transfer=%d ch=%d", payload(4, 4):uint(), payload(0, 2):uint())
        elseif ftype == 5 and payload_len >= 16 then
            tree:add(f.rndv_channel, payload(0, 2))
            tree:add(f.rndv_status, payload(2, 1))
            tree:add(f.rndv_transfer, payload(4, 4))
            tree:add(f.rndv_capacity, payload(8, 8))
            info = info .. string.format(" transfer=%d ch=%d %s", payload(4, 4):uint(), payload(0, 2):uint(), statuses[payload(2, 1):uint()] or "?")
        elseif (ftype == 6 or ftype == 7) and payload_len >= 32 then
            tree:add(f.rma_channel, payload(0, 2))
            tree:add(f.rma_inline, payload(2, 1))
            tree:add(f.rma_transfer, payload(4, 4))
            tree:add(f.rma_key, payload(8, 8))
            tree:add(f.rma_offset, payload(16, 8))
            tree:add(f.rma_len, payload(24, 8))
            if payload_len > 32 then tree:add(f.payload, payload(32, payload_len - 32)) end
            info = info .. string.format(" transfer=%d ch=%d", payload(4, 4):uint(), payload(0, 2):uint())
        elseif ftype == 9 and payload_len >= 16 then
            tree:add(f.ctl_code, payload(0, 1))
            tree:add(f.ctl_status, payload(1, 1))
            tree:add(f.ctl_channel, payload(2, 2))
            tree:add(f.ctl_transfer, payload(4, 4))
            tree:add(f.ctl_detail, payload(8, 8))
            info = info .. " " .. (control_codes[payload(0, 1):uint()] or "control")
        elseif ftype ~= 8 then
            tree:add_proto_expert_info(e.bad_body)
        end
        if ftype == 8 and payload_len > 0 then tree:add(f.payload, payload) end
    elseif payload_len > 0 then
        tree:add(f.payload, payload)
    end
    if ftype == 1 and band(flags, FLAG_BUNDLE) == 0 then
        info = info .. string.format(" msg=%d len=%d", msg_id, payload_len)
    end
    if len > HEADER_LEN + payload_len then
        tree:add(f.padding, tvb(HEADER_LEN + payload_len))
    end

    -- Sequence analysis.
    if not pinfo.visited and results[pinfo.number] == nil then
        local key = string.format("%s|%s>%s|%d.%d", ctx.capture_point, src, dst, epoch, generation)
        local r = {}
        if band(flags, FLAG_ACK) ~= 0 then
            -- What the receiver (this frame's sender) has acknowledged of
            -- the reverse flow, as seen at this capture point.
            local rkey = string.format("%s|%s>%s", ctx.capture_point, dst, src)
            local cum = acked[rkey]
            if cum == nil or seq_before(cum, ack) then acked[rkey] = ack end
        end
        if ftype == 1 and sequenced then
            r = analyse_data(key, string.format("%s|%s>%s", ctx.capture_point, src, dst), seq, pinfo.number)
        elseif ftype == 2 and payload_len >= 8 and band(flags, FLAG_ACK) ~= 0 and band(flags, FLAG_PING) == 0 then
            local bitmap = tvb:raw(HEADER_LEN + 8, math.min(payload_len - 8, 32))
            local prev = ack_flows[key]
            if prev and prev.ack == ack and prev.bitmap == bitmap then
                r.dupack = prev.frame
            else
                ack_flows[key] = { ack = ack, bitmap = bitmap, frame = pinfo.number }
            end
        end
        results[pinfo.number] = r
    end
    local r = results[pinfo.number]
    if r and (r.retrans or r.dup or r.ooo or r.gap or r.dupack) then
        local at = tree:add(f.analysis, tvb(0, 0)):set_generated()
        if r.retrans then
            at:add(f.an_retrans, tvb(0, 0)):set_generated():add_proto_expert_info(e.retrans)
            info = "[Retransmission] " .. info
        end
        if r.dup then
            at:add(f.an_dup, tvb(0, 0)):set_generated():add_proto_expert_info(e.dup)
            info = "[Duplicate] " .. info
        end
        if r.first then at:add(f.an_first, r.first):set_generated() end
        if r.ooo then
            at:add(f.an_ooo, tvb(0, 0)):set_generated():add_proto_expert_info(e.ooo)
            info = "[Out of order] " .. info
        end
        if r.gap then
            at:add(f.an_gap, r.gap):set_generated():add_proto_expert_info(e.gap)
            info = string.format("[%d not seen] ", r.gap) .. info
        end
        if r.dupack then
            at:add(f.an_dupack, tvb(0, 0)):set_generated():add_proto_expert_info(e.dupack)
            at:add(f.an_dupack_of, r.dupack):set_generated()
            info = "[Dup ACK] " .. info
        end
    end
    pinfo.cols.src = src
    pinfo.cols.dst = dst
    return HEADER_LEN + payload_len, info
end

------------------------------------------------------------------------
-- Congestion state (capture kind 4)

local NS_UNKNOWN = 0xFFFFFFFF

-- A duration in nanoseconds as microseconds, for people: rounded to whole
-- microseconds from 10 µs, else with one decimal (cut, not rounded).
local function us_text(ns)
    if ns == NS_UNKNOWN then return "unknown" end
    if ns >= 10000 then return string.format("%d µs", math.floor(ns / 1000 + 0.5)) end
    return string.format("%d.%d µs", math.floor(ns / 1000), math.floor((ns % 1000) / 100))
end

-- A nanosecond field: the raw value, its text in microseconds.
local function add_ns(tree, field, range, label)
    local ns = range:uint()
    local item = tree:add(field, range)
    if ns == NS_UNKNOWN then
        item:set_text(label .. ": unknown")
    else
        item:set_text(string.format("%s: %d ns (%s)", label, ns, us_text(ns)))
    end
    return ns
end

-- Dissects a congestion-state body; returns the Info text.
local function dissect_congestion(body, tree, local_s, peer_s)
    local arrow = string.format("%s → %s", local_s, peer_s)
    if body:len() < CC_BODY_LEN then
        tree:add_proto_expert_info(e.truncated)
        return string.format("Congestion %s: truncated state (%d bytes)", arrow, body:len())
    end
    local cause = body(0, 1):uint()
    local slow = band(body(1, 1):uint(), 1) ~= 0
    local window = body(4, 4):uint()
    tree:add(f.cc_cause, body(0, 1))
    local ft = tree:add(f.cc_flags, body(1, 1))
    ft:add(f.cc_slow_start, body(1, 1))
    tree:add(f.cc_window, body(4, 4))
    local base = add_ns(tree, f.cc_base_rtt, body(8, 4), "Base round trip")
    local qdelay = add_ns(tree, f.cc_qdelay, body(12, 4), "Queueing delay")
    add_ns(tree, f.cc_srtt, body(16, 4), "Smoothed round trip")
    tree:add(f.cc_in_flight, body(20, 4))
    local rate = tree:add(f.cc_pacing_rate, body(24, 8))
    if body(24, 8):uint64() == UInt64(0) then rate:append_text(" (not pacing)") end
    local info = string.format("Congestion %s: %s, window %d frames, qdelay %s, base %s", arrow,
        cc_causes[cause] or string.format("cause %d", cause), window, us_text(qdelay), us_text(base))
    if slow then info = info .. ", slow start" end
    return info
end

------------------------------------------------------------------------
-- Entry points

local function set_columns(pinfo, info)
    pinfo.cols.protocol = "BCL"
    pinfo.cols.info = info
end

local function iface()
    local fi = interface_id()
    return fi and fi.value or 0
end

-- BCL_PCAP records: pseudo-header, then the item.
local function dissect_capture(tvb, pinfo, root)
    local tree = root:add(bcl, tvb())
    if tvb:len() < PSEUDO_HEADER_LEN then
        tree:add_proto_expert_info(e.truncated)
        set_columns(pinfo, "truncated BCL capture record")
        return tvb:len()
    end
    local hlen = tvb(3, 1):uint()
    if hlen < PSEUDO_HEADER_LEN or hlen > tvb:len() then hlen = PSEUDO_HEADER_LEN end
    local kind, dir = tvb(1, 1):uint(), tvb(2, 1):uint()
    local method = tvb(4, 8):stringz()
    local local_node, local_port = tvb(12, 4):uint(), tvb(16, 2):uint()
    local peer_port, peer_node = tvb(18, 2):uint(), tvb(20, 4):uint()
    local peer_known = not (peer_node == 0xFFFFFFFF and peer_port == 0xFFFF)
    local local_s = addr_text(local_node, local_port)
    local peer_s = peer_known and addr_text(peer_node, peer_port) or "?"

    local ph = tree:add(f.cap, tvb(0, hlen))
    if dir == 0 then
        ph:set_text(string.format("Capture: %s by %s over %s", cap_kinds[kind] or "record", local_s, method))
    else
        ph:set_text(string.format("Capture: %s %s by %s over %s", cap_kinds[kind] or "record", directions[dir] or "?", local_s, method))
    end
    ph:add(f.cap_version, tvb(0, 1))
    ph:add(f.cap_kind, tvb(1, 1))
    ph:add(f.cap_direction, tvb(2, 1))
    ph:add(f.cap_header_len, tvb(3, 1))
    ph:add(f.cap_method, tvb(4, 8), method)
    local lt = ph:add(f.cap_local, tvb(12, 6), local_s)
    lt:add(f.cap_local_node, tvb(12, 4))
    lt:add(f.cap_local_port, tvb(16, 2))
    local pt = ph:add(f.cap_peer, tvb(18, 6), peer_s)
    pt:add(f.cap_peer_port, tvb(18, 2))
    pt:add(f.cap_peer_node, tvb(20, 4))
    ph:add(f.cap_link, tvb(24, 4))
    if kind == 3 then
        ph:add(f.cap_bulk_kind, tvb(28, 1))
        ph:add(f.cap_channel, tvb(30, 2))
        ph:add(f.cap_transfer, tvb(32, 4))
    end
    ph:add(f.cap_pid, tvb(36, 4))
    ph:add(f.cap_total_len, tvb(40, 8))

    local body = tvb(hlen):tvb()
    local total = tvb(40, 8):uint64():tonumber()
    local src_s, dst_s = peer_s, local_s
    if dir == 2 then src_s, dst_s = local_s, peer_s end
    local arrow = string.format("%s → %s", src_s, dst_s)
    local info
    if kind == 1 then
        local _, i = dissect_frame(body, pinfo, tree, { capture_point = string.format("if%d", iface()) })
        info = i
    elseif kind == 2 then
        tree:add(f.direct_len, body:len()):set_generated()
        if body:len() > 0 then tree:add(f.direct_data, body()) end
        info = string.format("Direct message %s, %d bytes", arrow, total)
        pinfo.cols.src, pinfo.cols.dst = src_s, dst_s
    elseif kind == 5 then
        tree:add(f.direct_len, body:len()):set_generated()
        info = string.format("Direct service message %s, %d bytes", arrow, total) .. dissect_service(body, tree)
        pinfo.cols.src, pinfo.cols.dst = src_s, dst_s
    elseif kind == 3 then
        if body:len() > 0 then tree:add(f.bulk_data, body()) end
        info = string.format("Bulk %s %s transfer=%d ch=%d, %d bytes", bulk_kinds[tvb(28, 1):uint()] or "?", arrow,
            tvb(32, 4):uint(), tvb(30, 2):uint(), total)
        if body:len() < total then info = info .. string.format(" (%d captured)", body:len()) end
        pinfo.cols.src, pinfo.cols.dst = src_s, dst_s
    elseif kind == 4 then
        info = dissect_congestion(body, tree, local_s, peer_s)
        pinfo.cols.src, pinfo.cols.dst = local_s, peer_s
    else
        info = string.format("unknown capture record kind %d", kind)
    end
    if dir == 1 or dir == 2 then
        set_columns(pinfo, string.format("[%s %s] %s", method, dir == 2 and "tx" or "rx", info))
    else
        set_columns(pinfo, string.format("[%s] %s", method, info))
    end
    return tvb:len()
end

-- A BCL frame on a wire (Ethernet payload, UDP payload).
local function dissect_wire(tvb, pinfo, root)
    local tree = root:add(bcl, tvb())
    local used, info = dissect_frame(tvb, pinfo, tree, { capture_point = string.format("wire%d", iface()) })
    tree:set_len(math.min(used, tvb:len()))
    set_columns(pinfo, info)
    return used
end

function bcl.dissector(tvb, pinfo, root)
    return dissect_wire(tvb, pinfo, root)
end

local capture_proto = Proto("bclcap", "BCL capture record")
function capture_proto.dissector(tvb, pinfo, root)
    return dissect_capture(tvb, pinfo, root)
end

-- UDP payloads that are exactly one valid-looking BCL frame.
local function heuristic(tvb, pinfo, root)
    local len = tvb:len()
    if len < HEADER_LEN then return false end
    if tvb(0, 1):uint() ~= 1 then return false end
    local t = tvb(1, 1):uint()
    if t < 1 or t > 9 then return false end
    if band(tvb(3, 1):uint(), 0xFF - FLAGS_KNOWN) ~= 0 then return false end
    if HEADER_LEN + tvb(38, 2):uint() ~= len then return false end
    dissect_wire(tvb, pinfo, root)
    return true
end

DissectorTable.get("wtap_encap"):add(WTAP_ENCAP_BCL, capture_proto)
local ethertype = DissectorTable.get("ethertype")
for _, t in ipairs(ETHERTYPES) do ethertype:add(t, bcl) end
bcl:register_heuristic("udp", heuristic)
DissectorTable.get("udp.port"):add_for_decode_as(bcl)
