import CViewfinderKernels
import Foundation
import Testing
@testable import ViewfinderSinks

/// The delta bit-plane code of version 4 dumps (`vf_dbp_encode` / `vf_dbp_decode`).
@Suite struct DeltaBitPlanesTests {
    func encode(_ src: [UInt8], rowBytes: Int, rows: Int) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: vf_dbp_bound(rowBytes, rows))
        let n = src.withUnsafeBufferPointer { s in out.withUnsafeMutableBufferPointer { vf_dbp_encode(s.baseAddress!, rowBytes, rows, $0.baseAddress!) } }
        #expect(n <= vf_dbp_bound(rowBytes, rows) - 16, "the planes' 16-byte stores stay in the bound's slack")
        return Array(out[0..<n])
    }

    func decode(_ code: [UInt8], rowBytes: Int, rows: Int) -> [UInt8]? {
        var out = [UInt8](repeating: 0xEE, count: rowBytes * rows)
        let r = code.withUnsafeBufferPointer { c in out.withUnsafeMutableBufferPointer { vf_dbp_decode(c.baseAddress ?? UnsafePointer(bitPattern: 1)!, c.count, rowBytes, rows, $0.baseAddress!) } }
        return r == 0 ? out : nil
    }

    /// Every width around the 16-byte blocks (the SIMD path and the padded last block), one and
    /// several rows, random bytes, small noise around a ramp and flat rows: back bit-exact.
    @Test func everyWidthRoundTrips() {
        var rng = UInt64(5)
        func next() -> UInt8 { rng = rng &* 6364136223846793005 &+ 1442695040888963407; return UInt8(truncatingIfNeeded: rng >> 40) }
        for w in [1, 2, 3, 15, 16, 17, 31, 32, 33, 47, 64, 100, 640, 961] {
            for rows in [1, 2, 5] {
                let random = (0..<(w * rows)).map { _ in next() }
                let ramp = (0..<(w * rows)).map { i in UInt8(truncatingIfNeeded: (i % w) / 3 + (i / w) * 2 + Int(next() % 5)) }
                let flat = [UInt8](repeating: 128, count: w * rows)
                for (name, plane) in [("random", random), ("ramp", ramp), ("flat", flat)] {
                    let code = encode(plane, rowBytes: w, rows: rows)
                    #expect(decode(code, rowBytes: w, rows: rows) == plane, "\(name) \(w)x\(rows)")
                }
            }
        }
    }

    /// The bytes are the format's (RawDumpFormat): a flat 128 row codes to widths of 0; one
    /// difference of +1 (zigzag 2) in the first byte is one plane, bit 0 of plane 1.
    @Test func theCodeIsTheDocumentedOne() {
        #expect(encode([UInt8](repeating: 128, count: 32), rowBytes: 32, rows: 1) == [0])
        var row = [UInt8](repeating: 128, count: 16)
        row[0] = 129
        // width 2 (code 2 = 0b10), plane 0 empty, plane 1 has bit 0.
        #expect(encode(row, rowBytes: 16, rows: 1) == [2, 0, 0, 1, 0])
        // The second row is coded against the first: the same row again is all zero.
        #expect(encode(row + row, rowBytes: 16, rows: 2) == [2, 0, 0, 1, 0, 0])
        row[15] = 127   // -1 → zigzag 1: bit 15 of plane 0
        #expect(encode(row, rowBytes: 16, rows: 1) == [2, 0, 0x80, 1, 0])
    }

    /// Damaged input is refused, never read or written past: every truncation, a width above 8,
    /// bytes left over.
    @Test func damagedCodeIsRefused() {
        let w = 50, rows = 3
        var rng = UInt64(9)
        let plane = (0..<(w * rows)).map { _ -> UInt8 in rng = rng &* 6364136223846793005 &+ 1; return UInt8(truncatingIfNeeded: rng >> 45) & 0x1F }
        let code = encode(plane, rowBytes: w, rows: rows)
        for cut in 0..<code.count { #expect(decode(Array(code[0..<cut]), rowBytes: w, rows: rows) == nil, "cut at \(cut)") }
        var wide = code
        wide[0] = (wide[0] & 0xF0) | 9
        #expect(decode(wide, rowBytes: w, rows: rows) == nil)
        #expect(decode(code + [0], rowBytes: w, rows: rows) == nil)
    }

    /// Through the chunk table, as a dump's reader decodes it: damaged chunks are typed errors.
    @Test func chunkTableErrorsAreTyped() {
        let payload: [UInt8] = [3, 0, 0, 0] + [UInt8](repeating: 0, count: 24)
        let out = UnsafeMutableRawPointer.allocate(byteCount: 64, alignment: 16)
        defer { out.deallocate() }
        #expect(throws: ChunkedLZ4.ChunkError.self) {
            try payload.withUnsafeBytes { try ChunkedLZ4.decompress($0, into: out, rawLength: 64, deltaPlanesWidth: 1) }
        }
    }
}
