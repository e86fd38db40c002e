extension DocumentStore {
    /// The open documents by path.
    ///
    /// Each entry lives in a slot of its own on the heap, and the table holds references to
    /// the slots. An entry is a few hundred bytes: a table of entries moves all of them each
    /// time it grows, into memory it touches for the first time, and tens of thousands of
    /// new documents grow it many times. A table of slots moves 8 bytes per document
    /// instead, and an entry found once (``index(forKey:)``) is changed in place.
    struct EntryTable: Sequence {
        final class Slot {
            @exclusivity(unchecked) var entry: Entry?
            init(_ entry: Entry) { self.entry = entry }

            /// Runs `body` on the entry in place (while it is in the table).
            func modify<R, E: Error>(_ body: (inout Entry) throws(E) -> R) throws(E) -> R { try body(&entry!) }
        }

        typealias Index = [String: Slot].Index

        private var slots: [String: Slot] = [:]

        var count: Int { slots.count }
        var isEmpty: Bool { slots.isEmpty }
        var keys: [String: Slot].Keys { slots.keys }
        var values: Values { Values(slots: slots.values) }

        /// The entries, in the table's order.
        struct Values: Sequence {
            fileprivate let slots: [String: Slot].Values

            struct Iterator: IteratorProtocol {
                fileprivate var slots: [String: Slot].Values.Iterator
                mutating func next() -> Entry? { slots.next()?.entry! }
            }

            func makeIterator() -> Iterator { Iterator(slots: slots.makeIterator()) }
        }

        func index(forKey path: String) -> Index? { slots.index(forKey: path) }

        /// The entry at `path`; setting `nil` removes it. A change through this subscript
        /// (`entries[path]!.deadline = …`) looks the path up once and changes the entry in place.
        subscript(path: String) -> Entry? {
            get { slots[path]?.entry }
            set {
                if let slot = slots[path] {
                    if let newValue { slot.entry = newValue } else { slots.removeValue(forKey: path) }
                } else if let newValue {
                    slots[path] = Slot(newValue)
                }
            }
            _modify {
                if let slot = slots[path] {
                    yield &slot.entry
                    if slot.entry == nil { slots.removeValue(forKey: path) }
                } else {
                    var added: Entry? = nil
                    yield &added
                    if let added { slots[path] = Slot(added) }
                }
            }
        }

        /// The entry at `index` (from ``index(forKey:)``, with no insertion or removal since),
        /// changed in place.
        subscript(index: Index) -> Entry {
            get { slots.values[index].entry! }
            nonmutating _modify { yield &slots.values[index].entry! }
        }

        /// Puts `entry` at `path`; returns the entry it replaces.
        @discardableResult
        mutating func updateValue(_ entry: Entry, forKey path: String) -> Entry? {
            insert(entry, forKey: path).replaced
        }

        /// Puts `entry` at `path`; returns the entry it replaces and the slot it is in now,
        /// through which it can be changed without another lookup.
        mutating func insert(_ entry: Entry, forKey path: String) -> (replaced: Entry?, slot: Slot) {
            let slot = Slot(entry)
            return (slots.updateValue(slot, forKey: path)?.entry, slot)
        }

        /// Removes the entry at `path` and returns it.
        @discardableResult
        mutating func removeValue(forKey path: String) -> Entry? {
            slots.removeValue(forKey: path)?.entry
        }

        func makeIterator() -> LazyMapSequence<[String: Slot], (key: String, value: Entry)>.Iterator {
            slots.lazy.map { (key: $0.key, value: $0.value.entry!) }.makeIterator()
        }
    }
}
