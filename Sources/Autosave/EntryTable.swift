import CLinux
import Foundation

extension DocumentStore {
    /// The open documents by path: an open-addressing hash table whose keys are the
    /// paths' bytes, so that a request looks its document up by the bytes it carries,
    /// with no path string made (``index(forBytes:)``), and two names are one document
    /// exactly when their bytes are equal, as the file system compares names (Swift's
    /// `String` equality would take `é` precomposed and `e` + U+0301 for one name).
    ///
    /// Each entry lives in a slot of its own on the heap, and the table holds references to
    /// the slots. An entry is a few hundred bytes: a table of entries moves all of them each
    /// time it grows, into memory it touches for the first time, and tens of thousands of
    /// new documents grow it many times. A table of slots moves a key, a reference and a hash per
    /// document instead, and an entry found once (``index(forKey:)``) is changed in place.
    ///
    /// A bucket is a position in three arrays side by side: the keys' full hashes, the
    /// keys and the slots. A lookup reads the dense array of hashes (eight per cache line,
    /// no reference counted) and reads a key only where the hashes agree, to compare the
    /// bytes; an entry found is reached through its slot alone, with no key copied along.
    /// Linear probing; a removal shifts the buckets after it back (no tombstones); the
    /// table doubles at three quarters full. The hash is Swift's `Hasher`, seeded per
    /// process, so that no client can choose paths that collide.
    struct EntryTable: Sequence {
        final class Slot {
            @exclusivity(unchecked) var entry: Entry?
            init(_ entry: Entry) { self.entry = entry }

            /// Asks for the slot's memory — its header and the entry stored in it — to be
            /// brought into the CPU's caches, without waiting for it (and without a retain).
            @inline(__always)
            static func prefetchEntry(_ slot: Slot?) {
                guard let slot else { return }
                clinux_prefetch_lines(Unmanaged.passUnretained(slot).toOpaque(), linesOfSlot)
            }

            /// The cache lines a slot can span: its header and entry, from wherever the
            /// allocation starts within a line.
            static var linesOfSlot: Int32 { Int32((16 + MemoryLayout<Entry?>.size + 63 + 15) / 64) }

            /// Runs `body` on the entry in place (while it is in the table).
            func modify<R, E: Error>(_ body: (inout Entry) throws(E) -> R) throws(E) -> R { try body(&entry!) }
        }

        /// A bucket's position: valid until the next insertion or removal.
        typealias Index = Int

        /// Each bucket's key's hash (``hash(_:)``, never 0), or 0 where the bucket is empty.
        private var hashes: [Int] = []
        /// Each bucket's key (`""` where the bucket is empty).
        private var bucketKeys: [String] = []
        /// Each bucket's slot (`nil` where the bucket is empty).
        private var slots: [Slot?] = []
        private(set) var count = 0

        var isEmpty: Bool { count == 0 }

        /// The paths, in the table's order.
        var keys: [String] { zip(hashes, bucketKeys).compactMap { $0.0 == 0 ? nil : $0.1 } }
        var values: Values { Values(slots: slots) }

        /// The entries, in the table's order.
        struct Values: Sequence {
            fileprivate let slots: [Slot?]

            struct Iterator: IteratorProtocol {
                fileprivate var slots: IndexingIterator<[Slot?]>
                mutating func next() -> Entry? {
                    while let slot = slots.next() {
                        if let slot { return slot.entry! }
                    }
                    return nil
                }
            }

            func makeIterator() -> Iterator { Iterator(slots: slots.makeIterator()) }
        }

        struct Iterator: IteratorProtocol {
            fileprivate var keys: IndexingIterator<[String]>
            fileprivate var slots: IndexingIterator<[Slot?]>
            mutating func next() -> (key: String, value: Entry)? {
                while let key = keys.next(), let slot = slots.next() {
                    if let slot { return (key, slot.entry!) }
                }
                return nil
            }
        }

        func makeIterator() -> Iterator { Iterator(keys: bucketKeys.makeIterator(), slots: slots.makeIterator()) }

        // MARK: Hashing and comparing bytes

        /// The hash of a key's bytes: never 0, which marks an empty bucket.
        static func hash(_ bytes: UnsafeRawBufferPointer) -> Int {
            var hasher = Hasher()
            hasher.combine(bytes: bytes)
            let hash = hasher.finalize()
            return hash == 0 ? 1 : hash
        }

        /// Runs `body` on the UTF-8 bytes of `key` (a native string's own storage).
        static func withBytes<R>(_ key: String, _ body: (UnsafeRawBufferPointer) -> R) -> R {
            if let result = key.utf8.withContiguousStorageIfAvailable({ body(UnsafeRawBufferPointer($0)) }) {
                return result
            }
            var key = key
            return key.withUTF8 { body(UnsafeRawBufferPointer($0)) }
        }

        /// Compares in place: the key is borrowed, not copied (a copy is a retain, a write
        /// to the key's storage, where the comparison only reads it).
        static func equal(_ key: borrowing String, _ bytes: UnsafeRawBufferPointer) -> Bool {
            let equal = key.utf8.withContiguousStorageIfAvailable { own in
                own.count == bytes.count
                    && (own.isEmpty || memcmp(own.baseAddress!, bytes.baseAddress!, own.count) == 0)
            }
            return equal ?? key.utf8.elementsEqual(bytes)
        }

        // MARK: Finding

        /// The bucket holding `bytes`, or where it would go.
        ///
        /// Where the hashes agree, the slot's entry is asked of the memory before the key is
        /// compared (``Slot/prefetchEntry(_:)``): with many documents the key's bytes, the
        /// slot's first line and the entry's later ones are each a cache miss, and an edit
        /// reads all three one after the other; asked for together, they arrive together.
        private func probe(_ bytes: UnsafeRawBufferPointer, hash: Int) -> (position: Int, found: Bool) {
            hashes.withUnsafeBufferPointer { hashes in
                bucketKeys.withUnsafeBufferPointer { keys in
                    slots.withUnsafeBufferPointer { slots in
                        let mask = hashes.count - 1
                        var position = hash & mask
                        while true {
                            let stored = hashes[position]
                            if stored == 0 { return (position, false) }
                            if stored == hash {
                                Slot.prefetchEntry(slots[position])
                                if Self.equal(keys[position], bytes) { return (position, true) }
                            }
                            position = (position + 1) & mask
                        }
                    }
                }
            }
        }

        /// The entry whose path has exactly these UTF-8 bytes.
        func index(forBytes bytes: UnsafeRawBufferPointer) -> Index? {
            guard count > 0 else { return nil }
            let (position, found) = probe(bytes, hash: Self.hash(bytes))
            return found ? position : nil
        }

        func index(forKey path: String) -> Index? {
            guard count > 0 else { return nil }
            return Self.withBytes(path) { index(forBytes: $0) }
        }

        /// The path of the entry at `index`: the table's own string, no copy of its bytes.
        func key(at index: Index) -> String { bucketKeys[index] }

        // MARK: Reading and changing

        /// The entry at `path`; setting `nil` removes it. A change through this subscript
        /// (`entries[path]!.deadline = …`) looks the path up once and changes the entry in place.
        subscript(path: String) -> Entry? {
            get { index(forKey: path).map { slots[$0].unsafelyUnwrapped.entry! } }
            set {
                if let index = index(forKey: path) {
                    // In place: the entry keeps its slot.
                    if let newValue {
                        slots[index].unsafelyUnwrapped.entry = newValue
                    } else {
                        remove(at: index)
                    }
                } else if let newValue {
                    insert(newValue, forKey: path)
                }
            }
            _modify {
                if let index = index(forKey: path) {
                    let slot = slots[index].unsafelyUnwrapped
                    yield &slot.entry
                    if slot.entry == nil { remove(at: index) }
                } else {
                    var added: Entry? = nil
                    yield &added
                    if let added { insert(added, forKey: path) }
                }
            }
        }

        /// The entry at `index` (from ``index(forKey:)``, with no insertion or removal since),
        /// changed in place.
        subscript(index: Index) -> Entry {
            get { slots[index].unsafelyUnwrapped.entry! }
            nonmutating _modify {
                let slot = slots[index].unsafelyUnwrapped
                yield &slot.entry!
            }
        }

        /// Puts `entry` at `path`; returns the entry it replaces.
        @discardableResult
        mutating func updateValue(_ entry: Entry, forKey path: String) -> Entry? {
            insert(entry, forKey: path).replaced
        }

        /// Puts `entry` at `path`; returns the entry it replaces and the slot it is in now,
        /// through which it can be changed without another lookup.
        @discardableResult
        mutating func insert(_ entry: Entry, forKey path: String) -> (replaced: Entry?, slot: Slot) {
            if (count + 1) * 4 > hashes.count * 3 { grow() }
            let slot = Slot(entry)
            let (hash, position, found) = Self.withBytes(path) { bytes in
                let hash = Self.hash(bytes)
                let (position, found) = probe(bytes, hash: hash)
                return (hash, position, found)
            }
            if found {
                let replaced = slots[position].unsafelyUnwrapped.entry
                slots[position] = slot
                return (replaced, slot)
            }
            bucketKeys[position] = path
            slots[position] = slot
            hashes[position] = hash
            count += 1
            return (nil, slot)
        }

        /// Removes the entry at `path` and returns it.
        @discardableResult
        mutating func removeValue(forKey path: String) -> Entry? {
            guard let index = index(forKey: path) else { return nil }
            let entry = slots[index].unsafelyUnwrapped.entry
            remove(at: index)
            return entry
        }

        /// Empties the bucket at `index` and moves back the buckets after it that a probe
        /// would otherwise no longer reach.
        private mutating func remove(at index: Index) {
            let mask = hashes.count - 1
            var hole = index
            bucketKeys[hole] = ""
            slots[hole] = nil
            hashes[hole] = 0
            count -= 1
            var next = (hole + 1) & mask
            while hashes[next] != 0 {
                let home = hashes[next] & mask
                // The bucket stays where it is if its home lies cyclically in (hole, next].
                let stays = hole <= next ? (hole < home && home <= next) : (hole < home || home <= next)
                if !stays {
                    bucketKeys.swapAt(hole, next)
                    slots.swapAt(hole, next)
                    hashes[hole] = hashes[next]
                    hashes[next] = 0
                    hole = next
                }
                next = (next + 1) & mask
            }
        }

        private mutating func grow() {
            let oldKeys = bucketKeys
            let oldSlots = slots
            let oldHashes = hashes
            let capacity = Swift.max(16, oldHashes.count * 2)
            bucketKeys = Array(repeating: "", count: capacity)
            slots = Array(repeating: nil, count: capacity)
            hashes = Array(repeating: 0, count: capacity)
            let mask = capacity - 1
            for (old, hash) in oldHashes.enumerated() where hash != 0 {
                var position = hash & mask
                while hashes[position] != 0 { position = (position + 1) & mask }
                bucketKeys[position] = oldKeys[old]
                slots[position] = oldSlots[old]
                hashes[position] = hash
            }
        }
    }
}

/// A path relative to the root (or a name in a directory) as a set's member or a
/// dictionary's key, compared and hashed by its UTF-8 bytes, as the file system compares
/// names — as ``DocumentStore/EntryTable`` compares the documents' paths. `String`'s own
/// `==` and hash are by canonical equivalence: `d\u{E9}` and `de\u{301}`, two directories
/// on disk, would be one key. The store's directory caches
/// (``DocumentStore/directoryUses``, ``DocumentStore/missingDirectories``,
/// ``DocumentStore/knownDirectories`` and what is kept beside them) are keyed by it, and
/// so are ``IgnoreRules/files``.
/// Wrapping a string copies nothing; hashing and comparing read its bytes in place.
public struct PathKey: Hashable, Sendable, ExpressibleByStringLiteral, CustomStringConvertible {
    public let path: String

    public init(_ path: String) { self.path = path }
    public init(stringLiteral path: String) { self.path = path }

    public var description: String { path }

    public static func == (a: PathKey, b: PathKey) -> Bool {
        DocumentStore.EntryTable.withBytes(b.path) { DocumentStore.EntryTable.equal(a.path, $0) }
    }

    public func hash(into hasher: inout Hasher) {
        DocumentStore.EntryTable.withBytes(path) { hasher.combine(bytes: $0) }
        hasher.combine(0xFF as UInt8)  // the end, as `String` marks it (no UTF-8 byte is 0xFF)
    }
}
