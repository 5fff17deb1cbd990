#!/usr/bin/env python3
"""Writes the seed inputs of the engine_datagram fuzz target (fuzz/seeds/engine_datagram/),
and of the parse target (fuzz/seeds/parse/: receive buffers in the shape UDP GRO
makes, which random mutation does not find: vipc datagrams of one size back to
back, the last shorter).

The byte layout is the script format decoded by fuzz_targets/engine_datagram.rs
(`Harness::step`); each seed walks one path that random mutation finds slowly:
a remote Send received and replied to, moves in both directions, answers to the
engine's own packets. libFuzzer mutates them from there. Run after changing the
script format:  python3 fuzz/seeds/gen.py
"""
import os
import struct

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "engine_datagram")

SEND, REPLY, MOVE_TO_DATA, MOVE_FROM_DATA = 2, 3, 9, 12  # indices into PacketType::ALL
SEG_READ, SEG_WRITE, IDEMPOTENT = 2, 4, 1

LOCAL0 = 0x00  # pick_pid: locals[0] (the server in Receive)
PEER0 = 0x02   # pick_pid: PEERS[0]
SENDER = 0x00  # pick_partner: the last sender received


def u16(v):
    return struct.pack(">H", v)


def crafted(ptype, flags=0, src=PEER0, dst=LOCAL0, total=0, local=0, remote=0, data=b"", seq_sel=0):
    """op 1: a well-formed packet. sel bit 0 = 0: incarnation 7; bits 3..4: seq."""
    sel = (seq_sel & 3) << 3
    return (bytes([1, sel, ptype]) + u16(flags) + bytes([src, dst]) + u16(total) + u16(local)
            + u16(remote) + b"MSG-SEED" + u16(len(data)) + data)


def answer(index, sel=0, fields=0, n_sel=0):
    """op 4: answer the engine's recent packet `index` with its natural reply type."""
    return bytes([4, index, sel, fields, n_sel])


def wait(kind, b=0):
    """op 9: time passes (kind 1 = T_r, 2 = T_t)."""
    return bytes([9, (b & ~3) | kind])


def api(action, rest, who=0):
    """op 11: API call by locals[who]."""
    return bytes([11, who, action]) + rest


def reply(seg=None):
    rest = bytes([SENDER]) + b"REPLY-00"
    if seg is None:
        return api(3, rest + bytes([0]))
    off, data = seg
    return api(3, rest + bytes([1]) + u16(off) + u16(len(data)) + data)


def move_from(length_byte, off=0):
    return api(7, bytes([SENDER]) + u16(off) + bytes([length_byte]))


def move_to(length_byte, off=0):
    return api(6, bytes([SENDER]) + u16(off) + bytes([length_byte]))


def rmem(sub, b=0, host=0, size=0x400, off=0x10, length=0x20, rest=b""):
    """op 11, action 11: a remote-memory call. b: bits 4.. segment, bit 0 forged descriptor,
    bits 1-2 deny read/write; host: 0 = this node (local path), 1 = host 2, 2 = host 3."""
    return api(11, bytes([b, host]) + u16(size) + u16(off) + u16(length) + bytes([sub]) + rest)


def receive():
    return api(0, bytes([0x10, 0x00]))  # capacity 4096


seeds = {
    # A remote Send, received and replied to; then a duplicate and a newer Send.
    "send-reply": crafted(SEND) + reply() + bytes([8]) + crafted(SEND, seq_sel=1) + wait(1),
    # A read/write-granted 4 KiB segment with 1000 bytes appended; MoveFrom 1401
    # bytes, answered with MoveFromData; reply with a segment.
    "move-from": crafted(SEND, SEG_READ | SEG_WRITE, total=4096, data=bytes(range(256)) * 4)
    + move_from(0x01) + answer(0xff) + answer(0xfe) + wait(1) + answer(0xff)
    + reply((16, b"written-by-reply")) + wait(2),
    # A write-granted 16 KiB segment; MoveTo 4608 bytes, acknowledged.
    "move-to": crafted(SEND, SEG_WRITE, total=0x4000) + move_to(0x12) + answer(0xff) + answer(0xfe)
    + wait(1) + answer(0xff) + reply() + wait(2),
    # The clients' Sends answered: a Reply, then replyPending and time passing.
    "client-replies": answer(1) + answer(2, sel=1, fields=0) + wait(1) + answer(0) + wait(2) + wait(2),
    # A remote server writes into client 1's segment (MoveToData on its exchange).
    "client-segment": bytes([4, 1, 1, MOVE_TO_DATA, 0, 1]) + bytes([4, 1, 1, MOVE_FROM_DATA - 9, 0, 0])
    + wait(1) + answer(1),
    # Receive again after a reply, with an idempotent Send in between.
    "idempotent": crafted(SEND, IDEMPOTENT) + reply() + receive() + crafted(SEND, IDEMPOTENT) + bytes([8]),
    # Remote memory on the local path: write, CAS-II, inhibit, write again (queued), drain the channels.
    "rmem-local": rmem(0, rest=bytes(range(32))) + rmem(3, rest=bytes([0, 1]) + b"NONC" + u16(8))
    + rmem(6, b=0x10 & 0, off=0x10, length=8) + rmem(0, rest=bytes(32)) + rmem(7),
    # Remote memory to host 2: a read and a CAS-II into the anonymous segment, answered
    # naturally (MemWrite with ANSWER into the destination), an import, time passing.
    "rmem-remote": rmem(2, b=0x10, host=1, rest=u16(0)) + answer(0xff, n_sel=1) + answer(0xfe, n_sel=1)
    + rmem(3, b=0x10, host=1, rest=bytes([0, 1]) + b"NONC" + u16(16)) + answer(0xff, n_sel=1)
    + rmem(4, rest=bytes([1])) + answer(0xff) + wait(1) + wait(2),
}

os.makedirs(OUT, exist_ok=True)
for name, body in seeds.items():
    for keyed in (0, 1):
        with open(os.path.join(OUT, f"{name}-{'keyed' if keyed else 'plain'}"), "wb") as f:
            f.write(bytes([keyed]) + body)
print(f"wrote {2 * len(seeds)} seeds to {OUT}")


def datagram(ptype, data_len):
    """A whole unkeyed vipc packet (PROTOCOL section 2) with `data_len` data bytes."""
    words = struct.pack(">IIIIIIII", 1, 0x00010001, 0x00020001, 0, data_len, data_len, 0, 0)
    return struct.pack(">HBBHH", 0x5669, 1, ptype + 1, 0, 7) + words + bytes(32) + bytes([0x5A]) * data_len


PARSE_OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "parse")
coalesced = {
    "gro-chunks": datagram(MOVE_TO_DATA, 1400) * 5 + datagram(MOVE_TO_DATA, 200),
    "gro-small": datagram(REPLY, 0) * 3,
    "gro-equal": datagram(SEND, 64) * 2,
    "one-datagram": datagram(SEND, 100),
}
os.makedirs(PARSE_OUT, exist_ok=True)
for name, body in coalesced.items():
    with open(os.path.join(PARSE_OUT, name), "wb") as f:
        f.write(body)
print(f"wrote {len(coalesced)} seeds to {PARSE_OUT}")
