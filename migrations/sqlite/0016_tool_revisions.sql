-- A tool row is written by two hands: upstream syncs (the tool's own definition) and admins
-- (`PUT /tools/{name}`, the descriptor). Each write reads the row, changes its own part and
-- writes the whole row back only if `revision` is still what it read, so neither can put back
-- what it read over the other's newer write (a sync racing an admin's descriptor lost it).
ALTER TABLE tools ADD COLUMN revision INTEGER NOT NULL DEFAULT 0;
