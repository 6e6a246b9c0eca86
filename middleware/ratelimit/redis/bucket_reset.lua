-- sluice: forget one bucket (it starts full again); replies the keys removed
return redis.call('DEL', unpack(KEYS))
