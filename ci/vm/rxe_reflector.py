#!/usr/bin/env python3
"""The host end of the wire for ci/vm/capture-rxe-frames.sh.

QEMU's socket netdev carries each Ethernet frame of the VM's eth1 as one UDP
datagram on the host's loopback. This script is 10.9.0.2 on that wire: it
answers ARP for it, records every RoCEv2 frame the VM sends (one hex line
each, as rxe built it), and sends each one back as if 10.9.0.2 had sent it
(addresses swapped, IPv4 checksum and ICRC recomputed), so the VM's other
QP receives it and answers.

Usage: rxe_reflector.py LISTEN_PORT VM_PORT OUT_FILE
"""
import socket
import struct
import sys
import zlib

HOST_MAC = bytes.fromhex("020000000902")
HOST_IP = socket.inet_aton("10.9.0.2")
ROCE_PORT = 4791


def ipv4_checksum(h):
    s = sum(struct.unpack("!10H", h))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return (~s) & 0xFFFF


def icrc(ip_through_pad):
    # rdma_rxe's ICRC (rxe_icrc.c): CRC-32 over 8 bytes of ones, then the
    # IPv4 + UDP + BTH headers with TOS, TTL, the checksums and the BTH's
    # FECN/BECN byte masked to ones, then the rest.
    m = bytearray(ip_through_pad[:40])
    m[1] = m[8] = 0xFF
    m[10] = m[11] = 0xFF
    m[26] = m[27] = 0xFF
    m[32] = 0xFF
    crc = zlib.crc32(b"\xff" * 8)
    crc = zlib.crc32(bytes(m), crc)
    crc = zlib.crc32(ip_through_pad[40:], crc)
    return struct.pack("<I", crc)


def main():
    listen_port, vm_port, out_path = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", listen_port))
    vm = ("127.0.0.1", vm_port)
    with open(out_path, "w", buffering=1) as out:
        while True:
            frame, _ = sock.recvfrom(65536)
            if len(frame) < 42:
                continue
            ethertype = struct.unpack("!H", frame[12:14])[0]
            if ethertype == 0x0806 and frame[21] == 1 and frame[38:42] == HOST_IP:
                vm_mac, vm_ip = frame[22:28], frame[28:32]
                arp = struct.pack("!HHBBH", 1, 0x0800, 6, 4, 2) + HOST_MAC + HOST_IP + vm_mac + vm_ip
                sock.sendto(vm_mac + HOST_MAC + b"\x08\x06" + arp, vm)
                continue
            if ethertype != 0x0800 or frame[23] != 17:
                continue
            if struct.unpack("!H", frame[36:38])[0] != ROCE_PORT:
                continue
            out.write(frame.hex() + "\n")
            ip_len = struct.unpack("!H", frame[16:18])[0]
            ip = bytearray(frame[14 : 14 + ip_len])
            vm_ip = bytes(ip[12:16])
            ip[12:16] = HOST_IP
            ip[16:20] = vm_ip
            ip[10:12] = b"\x00\x00"
            ip[10:12] = struct.pack("!H", ipv4_checksum(bytes(ip[:20])))
            ip[-4:] = icrc(bytes(ip[:-4]))
            sock.sendto(frame[6:12] + HOST_MAC + b"\x08\x00" + bytes(ip), vm)


if __name__ == "__main__":
    main()
