/// The last few seconds of compressed video, kept in one preallocated block of memory so that a
/// recording can start with what happened just before the trigger.
///
/// Entries are JPEG images stored back to back in a circular byte area; the oldest are evicted
/// when they fall out of the time window or when room is needed. Nothing is allocated after init.
/// Used by one thread (the movie output's).
final class PreRollBuffer {
    let seconds: Double
    let capacity: Int
    private let storage: UnsafeMutableRawPointer
    private struct Entry { var offset: Int; var count: Int; var timestamp: UInt64 }
    private var entries: [Entry]
    private var head = 0
    private var writePosition = 0
    /// Frames evicted for lack of room (not for age).
    private(set) var evictedForSpace = 0

    init(seconds: Double, capacityBytes: Int) {
        self.seconds = seconds
        self.capacity = max(capacityBytes, 1)
        storage = .allocate(byteCount: self.capacity, alignment: 64)
        entries = []
        entries.reserveCapacity(1024)
    }
    deinit { storage.deallocate() }

    var count: Int { entries.count - head }
    var isEmpty: Bool { count == 0 }

    private func dropHead() {
        head += 1
        if head == entries.count { entries.removeAll(keepingCapacity: true); head = 0; writePosition = 0 }
        else if head >= 512 { entries.removeFirst(head); head = 0 }
    }

    /// Stores one image taken at `timestamp`; returns false when it is larger than the whole buffer.
    @discardableResult
    func append(_ bytes: UnsafeRawBufferPointer, timestamp: UInt64) -> Bool {
        let window = UInt64(seconds * 1e9)
        while count > 0, timestamp > entries[head].timestamp, timestamp - entries[head].timestamp > window { dropHead() }
        let n = bytes.count
        guard n <= capacity, n > 0 else { return false }
        while true {
            if count == 0 { writePosition = 0; break }
            let h = entries[head].offset
            if writePosition >= h {
                if writePosition + n <= capacity { break }
                if n <= h { writePosition = 0; break }
            } else if writePosition + n <= h {
                break
            }
            dropHead(); evictedForSpace += 1
        }
        storage.advanced(by: writePosition).copyMemory(from: bytes.baseAddress!, byteCount: n)
        entries.append(Entry(offset: writePosition, count: n, timestamp: timestamp))
        writePosition += n
        return true
    }

    /// Hands every stored image to `body`, oldest first, and empties the buffer.
    func drain(_ body: (UnsafeRawBufferPointer, UInt64) throws -> Void) rethrows {
        defer { entries.removeAll(keepingCapacity: true); head = 0; writePosition = 0 }
        for i in head..<entries.count {
            let e = entries[i]
            try body(UnsafeRawBufferPointer(start: storage + e.offset, count: e.count), e.timestamp)
        }
    }

    /// Timestamps held, oldest first (for tests and diagnostics).
    var timestamps: [UInt64] { entries[head...].map(\.timestamp) }
}
