-- A delivery may now be stored after its first attempt (pending, with attempts = 1): count it
-- as retrying from the moment it is inserted.
CREATE TRIGGER deliveries_retrying_ins AFTER INSERT ON deliveries
WHEN NEW.state = 'pending' AND NEW.attempts > 0 BEGIN
    UPDATE queue_counts SET n = n + 1 WHERE name = 'retrying';
END;
